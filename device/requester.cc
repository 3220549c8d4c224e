// Requester: turns send WQEs into request packets (IBA 9.7.1-9.7.4). Copies
// each WQE out of shared memory once, validates it, then segments it into
// FIRST/MIDDLE/LAST/ONLY packets of path-MTU payload.
#include <algorithm>
#include <cstring>

#include "device/device.h"
#include "device/mlx5_rq.h"
#include "device/mlx5_sq.h"
#include "device/wqe.h"

namespace uroce::device {

namespace {

// Where the WQEs the program posted end, in the units sq_user_fetched counts
// (uroce's ring: work requests; an mlx5-format queue: basic blocks). False
// for an index no queue can hold, or one moved back behind WQEs the engine
// already took (sq_user_fetched never passes a sane producer; without this
// check sq_next would run on past it, around and around the ring).
// `kMlx5`: whether the queue is in mlx5's format (qp.mlx5), decided once
// per requester_run so that uroce's own queues pay no test per WQE for it.
template <bool kMlx5>
bool posted_end(const Qp& qp, uint32_t* end) {
  if constexpr (kMlx5) return mlx5_sq_posted(qp, end);
  const uint32_t prod = qp.sq.hdr->producer.load(std::memory_order_acquire);
  *end = prod;
  return !(prod - qp.sq_user_head > qp.sq.size() || prod - qp.sq_user_head < qp.sq_user_fetched - qp.sq_user_head);
}

// Whether the engine's send sequence has a free slot. uroce's ring cannot
// hold more than the sequence; an mlx5-format queue can (one basic block
// per WQE), and its WQEs wait there until the sequence has room.
template <bool kMlx5>
bool sequence_has_room(const Qp& qp) { return !kMlx5 || qp.sq_fetched - qp.sq_head <= qp.sq_mask; }

// A local SGE through an indirect mkey: it keeps its offset (the gather,
// or a READ's or atomic's scatter, walks the layout, Device::mkey_spans).
// Out of line: a region's SGE pays nothing for it.
[[gnu::noinline]] bool mkey_sge_ok(const Device& dev, const abi::Sge& sge, uint32_t pd, uint32_t access) {
  uint64_t left;
  return is_mkey_key(sge.lkey) &&
         dev.check_mkey(sge.lkey, pd, sge.addr, sge.length, access, &left) == Device::MrCheck::kOk;
}

// Copies the user's next SQ slot out of shared memory into the engine's
// sequence at `index` and checks it. Returns the completion status the WQE
// will end with if it cannot be executed.
// `end`: where the posted WQEs end (uroce's ring: its producer index; an
// mlx5-format queue: its doorbell record's, mlx5_sq_posted).
template <bool kMlx5>
uint32_t fetch_wqe(Device& dev, Qp& qp, uint32_t index, uint32_t end) {
  abi::SendWqe& w = wqe_at(qp, index);
  const uint32_t body = qp.sq.stride - sizeof(abi::SendWqe);
  if constexpr (kMlx5) {
    // mlx5's segments, read into the same form; one that says nothing a
    // work request can gets an opcode none is, refused below.
    if (!mlx5_take_wqe(qp, end, w, body)) w.opcode = ~0u;
    dev.mlx5_activity();
  } else {
    // The header, then only the body it names (its SGEs or inline bytes,
    // bounded by the slot): the client may be rewriting the slot, so every
    // field is read from this copy, never from the ring again.
    const uint8_t* slot = qp.sq.slot(qp.sq_user_fetched++);
    std::memcpy(&w, slot, sizeof(abi::SendWqe));
    const uint64_t used =
        w.flags & IBV_SEND_INLINE ? uint64_t(w.inline_len) : uint64_t(w.num_sge) * sizeof(abi::Sge);
    if (used == sizeof(abi::Sge) && body >= sizeof(abi::Sge)) [[likely]]
      std::memcpy(&w + 1, slot + sizeof(abi::SendWqe), sizeof(abi::Sge));  // one SGE: a fixed-size copy, inlined
    else
      std::memcpy(&w + 1, slot + sizeof(abi::SendWqe), size_t(std::min<uint64_t>(used, body)));
    w.flags &= ~abi::kSendFlagInlineHead;  // the engine's own mark, never the client's
  }
  SendWqeState& st = wqe_state(qp, index);
  st = SendWqeState{};
  if (w.opcode >= 32 || !(executable_wr_ops(qp.type) & (1u << w.opcode))) {
    ++dev.counters_mut().bad_wqes;
    return IBV_WC_LOC_QP_OP_ERR;
  }
  if (is_local_op(w.opcode)) [[unlikely]] {
    // No data and no packet: the window or key is checked when it runs. A
    // memory registration keeps its layout, in the SGE area (abi_rings.h
    // UmrArgs), as far as the slot holds it; a tag-list append its buffer.
    st.is_local = true;
    w.num_sge = w.opcode == kWrUmr || w.opcode == kWrTagOp ? std::min<uint32_t>(w.num_sge, body / sizeof(abi::Sge)) : 0;
    return IBV_WC_SUCCESS;
  }
  st.is_rd_atomic = is_rd_atomic(w.opcode);
  if (w.opcode == IBV_WR_ATOMIC_WRITE) {
    // Its 8 bytes came in the WQE (SendWqe::compare_add), not through SGEs
    // or inline data (rxe: wqe->dma.atomic_wr): one packet, whatever the
    // client put in num_sge or the flags.
    w.num_sge = 0;
    w.flags &= ~uint32_t(IBV_SEND_INLINE);
    st.length = 8;
    st.npsn = 1;
    return IBV_WC_SUCCESS;
  }
  if (w.flags & IBV_SEND_INLINE) {
    if (w.inline_len > body || w.inline_len > qp.caps.max_inline_data || st.is_rd_atomic)
      return IBV_WC_LOC_LEN_ERR;
    st.length = w.inline_len;
    w.num_sge = 0;
  } else {
    if (w.num_sge > qp.caps.max_send_sge || w.num_sge * sizeof(abi::Sge) > body)
      return IBV_WC_LOC_LEN_ERR;
    if (w.flags & abi::kSendFlagInlineHead) [[unlikely]] {
      // An mlx5 WQE's inline head before its SGEs' data (device/mlx5_sq.cc).
      if (st.is_rd_atomic || w.inline_len > qp.caps.max_inline_data ||
          w.num_sge * sizeof(abi::Sge) + w.inline_len > body)
        return IBV_WC_LOC_LEN_ERR;
      st.length = w.inline_len;
    }
    const uint32_t need = st.is_rd_atomic ? IBV_ACCESS_LOCAL_WRITE : 0;
    abi::Sge* sge = wqe_sges(qp, index);
    for (uint32_t i = 0; i < w.num_sge; ++i) {
      if (sge[i].length == 0) continue;
      const Mr* mr;
      if (dev.check_mr(sge[i].lkey, qp.pd, sge[i].addr, sge[i].length, need, &mr) !=
          Device::MrCheck::kOk) {
        if (mkey_sge_ok(dev, sge[i], qp.pd, need)) {
          st.length += sge[i].length;
          continue;
        }
        if (!st.is_rd_atomic) return IBV_WC_LOC_PROT_ERR;
        // A READ's or an atomic's local key is checked when its response is
        // placed, as mlx5 and rxe (rxe_comp.c do_read/do_atomic) do: the
        // responder executes the request, and a remote error it answers
        // with comes first (on_read_or_atomic_response).
        st.local_key_bad = true;
        st.length += sge[i].length;
        continue;
      }
      sge[i].addr = mr->addr + (sge[i].addr - mr->iova);  // into the owner's address space
      st.length += sge[i].length;
    }
  }
  if (st.length > kMaxMsgSize) return IBV_WC_LOC_LEN_ERR;
  if (qp.type == IBV_QPT_UD && st.length > 4096) return IBV_WC_LOC_LEN_ERR;
  if (qp.type == IBV_QPT_RAW_PACKET) {
    // One whole Ethernet frame, without FCS (perftest's HW_CRC_ADDITION).
    if (st.length < sizeof(net::EthHdr) || st.length > dev.max_raw_frame()) return IBV_WC_LOC_LEN_ERR;
    st.npsn = 1;
    return IBV_WC_SUCCESS;
  }
  if ((w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
      st.length != 8)
    return IBV_WC_LOC_LEN_ERR;
  const uint32_t mtu = qp.type == IBV_QPT_UD ? 4096 : qp.mtu_bytes();
  st.npsn = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD
                ? 1
                : std::max<uint32_t>(1, uint32_t((st.length + mtu - 1) / mtu));
  return IBV_WC_SUCCESS;
}

// The bytes [req_offset, req_offset + len) of a message whose head is the
// WQE's inline bytes (kept after its SGEs) and whose rest is its SGEs' data.
bool gather_after_inline_head(Device& dev, Qp& qp, uint32_t index, const abi::SendWqe& w, uint8_t* dst,
                              uint32_t len) {
  const uint64_t offset = qp.req_offset;
  uint32_t from_head = 0;
  if (offset < w.inline_len) {
    from_head = uint32_t(std::min<uint64_t>(len, w.inline_len - offset));
    std::memcpy(dst, wqe_inline(qp, index) + w.num_sge * sizeof(abi::Sge) + offset, from_head);
  }
  if (from_head == len) return true;
  return gather_sges(dev, *qp.owner, wqe_sges(qp, index), w.num_sge, offset + from_head - w.inline_len,
                     dst + from_head, len - from_head);
}

// XRC requests name the receiving SRQ in every packet (XRCETH), a DCI's
// its target's key and itself (DCETH, device/dc.cc).
// One test of the opcode's flags on RC's path.
void set_xrc_srqn(Device& dev, const Qp& qp, const abi::SendWqe& w, net::Packet& p) {
  const net::OpcodeInfo& info = p.info();
  if (!(info.flags & (net::kHasXrcEth | net::kHasDcEth))) [[likely]]
    return;
  if (info.flags & net::kHasXrcEth)
    p.hdr<net::XrcEth>(info.xrceth_off)->srqn = w.xrc_remote_srqn & 0xffffff;
  else
    dev.dc_write_eth(qp, p);
}

uint8_t send_code(uint32_t op, bool first, bool last) {
  using namespace net::op;
  const bool imm = op == IBV_WR_SEND_WITH_IMM, inv = op == IBV_WR_SEND_WITH_INV;
  if (first && last) return imm ? kSendOnlyImm : inv ? kSendOnlyInv : kSendOnly;
  if (first) return kSendFirst;
  if (!last) return kSendMiddle;
  return imm ? kSendLastImm : inv ? kSendLastInv : kSendLast;
}

uint8_t write_code(uint32_t op, bool first, bool last) {
  using namespace net::op;
  const bool imm = op == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (first && last) return imm ? kWriteOnlyImm : kWriteOnly;
  if (first) return kWriteFirst;
  if (!last) return kWriteMiddle;
  return imm ? kWriteLastImm : kWriteLast;
}

// READs, atomics and ATOMIC WRITEs: one request packet asks for (or
// carries) the whole message; a READ resent after a partial answer asks for
// what is left of it, its responses using npsn PSNs.
bool send_whole_request(Device& dev, Qp& qp, const abi::SendWqe& w, const SendWqeState& st,
                        uint32_t mtu, net::Transport tr) {
  using namespace net::op;
  const uint8_t code = w.opcode == IBV_WR_RDMA_READ         ? kReadRequest
                       : w.opcode == IBV_WR_ATOMIC_WRITE    ? kAtomicWrite
                       : w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? kCompareSwap
                                                               : kFetchAdd;
  net::Packet* p = dev.new_packet(qp, net::make_opcode(tr, code), qp.req_psn, true);
  if (!p) [[unlikely]] return false;
  const net::OpcodeInfo& info = p->info();
  set_xrc_srqn(dev, qp, w, *p);
  const uint32_t left = uint32_t(st.length - qp.req_offset);
  uint32_t npsn = 1;
  if (info.has(net::kHasReth)) {
    auto* reth = p->hdr<net::Reth>(info.reth_off);
    reth->va = w.remote_addr + qp.req_offset;
    reth->rkey = w.rkey;
    reth->dma_len = left;
  }
  if (code == kReadRequest) {
    npsn = std::max<uint32_t>(1, (left + mtu - 1) / mtu);
  } else if (code == kAtomicWrite) {
    // The bytes as the client's memory held them (ibv_wr_atomic_write's
    // const void *), in the order they land in the responder's.
    std::memcpy(p->payload(), &w.compare_add, 8);
    p->payload_len = 8;
  } else {
    auto* ae = p->hdr<net::AtomicEth>(info.atomiceth_off);
    ae->va = w.remote_addr;
    ae->rkey = w.rkey;
    ae->swap_add = code == kCompareSwap ? w.swap : w.compare_add;
    ae->compare = code == kCompareSwap ? w.compare_add : 0;
  }
  dev.send_packet(qp, p);
  qp.req_psn = psn_add(qp.req_psn, npsn);
  qp.req_offset = st.length;
  return true;
}

// Sends the next packet of WQE sq_next; returns true when the WQE is fully sent.
[[gnu::always_inline]] inline bool send_next_packet(Device& dev, Qp& qp) {
  const uint32_t index = qp.sq_next;
  abi::SendWqe& w = wqe_at(qp, index);
  SendWqeState& st = wqe_state(qp, index);
  const uint32_t mtu = qp.type == IBV_QPT_UD ? 4096 : qp.mtu_bytes();
  const net::Transport tr = transport_of(qp);
  if (qp.req_offset == 0) {
    st.first_psn = qp.req_psn;
    st.started = true;
  }

  if (is_rd_atomic(w.opcode)) return send_whole_request(dev, qp, w, st, mtu, tr);

  const bool is_write = w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool first = qp.req_offset == 0;
  const uint32_t len = uint32_t(std::min<uint64_t>(mtu, st.length - qp.req_offset));
  const bool last = qp.req_offset + len == st.length;
  const uint8_t code = is_write ? write_code(w.opcode, first, last) : send_code(w.opcode, first, last);
  const bool ack_req = is_reliable(qp) &&
                       (last || ++qp.packets_since_ack_req >= kAckEveryPackets);
  if (ack_req) qp.packets_since_ack_req = 0;
  net::Packet* p = dev.new_packet(qp, net::make_opcode(tr, code), qp.req_psn, ack_req);
  if (!p) [[unlikely]] return false;
  const net::OpcodeInfo& info = p->info();
  set_xrc_srqn(dev, qp, w, *p);
  if (info.has(net::kHasReth)) {
    auto* reth = p->hdr<net::Reth>(info.reth_off);
    reth->va = w.remote_addr;
    reth->rkey = w.rkey;
    reth->dma_len = uint32_t(st.length);
  }
  if (info.has(net::kHasImm)) p->hdr<net::ImmDt>(info.imm_off)->imm = w.imm_data;
  if (info.has(net::kHasIeth)) p->hdr<net::Ieth>(info.ieth_off)->rkey = w.imm_data;
  if (info.has(net::kHasDeth)) {
    auto* deth = p->hdr<net::Deth>(info.deth_off);
    // IBA 10.2.5: a Q_Key with the high bit set means "use the QP's Q_Key".
    deth->qkey = (w.remote_qkey & 0x80000000u) ? qp.qkey : w.remote_qkey;
    deth->src_qp = qp.qpn;
    p->bth()->dest_qp = w.remote_qpn & kQpnMask;
  }
  if (last && (w.flags & IBV_SEND_SOLICITED)) p->bth()->flags |= net::Bth::kSolicited;
  bool ok = true;
  if (w.flags & IBV_SEND_INLINE)
    std::memcpy(p->payload(), wqe_inline(qp, index) + qp.req_offset, len);
  else if (w.flags & abi::kSendFlagInlineHead) [[unlikely]]
    ok = gather_after_inline_head(dev, qp, index, w, p->payload(), len);
  else
    ok = gather_sges(dev, *qp.owner, wqe_sges(qp, index), w.num_sge, qp.req_offset, p->payload(), len);
  if (!ok) {
    // The client unmapped memory it had registered: a local protection error,
    // reported in order by requester_run.
    dev.memory_fault("send gather", qp.owner, w.num_sge ? wqe_sges(qp, index)[0].addr : 0, len);
    st.status = IBV_WC_LOC_PROT_ERR;
    dev.free_packet(p);
    qp.req_offset = 0;
    return false;
  }
  p->payload_len = len;
  dev.send_packet(qp, p, qp.type == IBV_QPT_UD ? &w.av : nullptr);
  qp.req_psn = psn_add(qp.req_psn, 1);
  qp.req_offset += len;
  return last;
}

// BIND_MW and LOCAL_INV: the device does them when the requester reaches
// them (rxe_do_local_ops; mlx5 fences the WQE after a bind, so later
// requests see it done), once: a go-back-N pass over one only steps past
// it. They send nothing and take no PSN; on RC they complete in order
// behind the requests before them. False if it failed (st.status says how).
bool run_local_wqe(Device& dev, Qp& qp, const abi::SendWqe& w, SendWqeState& st) {
  if (!st.local_done) {
    st.local_done = true;
    st.status = w.opcode == IBV_WR_BIND_MW  ? dev.bind_mw(qp, w.bind)
                : w.opcode == kWrMemcpy     ? dev.dma_copy(qp, w.copy)
                : w.opcode == kWrUmr        ? dev.register_mkey(qp, w.umr, wqe_sges(qp, qp.sq_next), w.num_sge)
                : w.opcode == kWrNop        ? uint32_t(IBV_WC_SUCCESS)
                : w.opcode == kWrTagOp      ? dev.tag_list_op(qp, w.tag_op, w.num_sge ? wqe_sges(qp, qp.sq_next) : nullptr)
                                            : dev.local_invalidate(qp, w.imm_data);
    if (st.status != IBV_WC_SUCCESS) return false;
    ++qp.locals_unretired;
    st.started = true;
    st.first_psn = qp.req_psn;  // npsn 0: what acknowledges the requests before it covers it
  }
  ++qp.sq_next;
  return true;
}

// UC and UD complete a WQE as soon as its last packet is sent.
void complete_unreliable(Device& dev, Qp& qp) {
  while (qp.sq_head != qp.sq_next) complete_send_head(dev, qp, wqe_state(qp, qp.sq_head).status);
}

}  // namespace

namespace {

// The client-address spans that bytes [offset, offset + len) of a message
// occupy across its SGEs. Returns how many, or -1 if the SGEs are too short.
int sge_spans(const Device& dev, const Owner& owner, const abi::Sge* sge, uint32_t num_sge,
              uint64_t offset, uint32_t len, RemoteSpan (&out)[kMaxSge]) {
  int n = 0;
  uint64_t want = len;
  for (uint32_t i = 0; i < num_sge && want; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    const uint64_t chunk = std::min<uint64_t>(sge[i].length - offset, want);
    if (is_mkey_key(sge[i].lkey)) [[unlikely]] {  // an indirect mkey: the spans its layout names
      if (!dev.mkey_spans(owner, sge[i].lkey, sge[i].addr + offset, chunk, out, &n, int(kMaxSge))) return -1;
      want -= chunk;
      offset = 0;
      continue;
    }
    // A deregistered MR leaves its bytes to process_vm_* (nothing shared).
    const Mr* mr = dev.find_mr(sge[i].lkey);
    out[n++] = {sge[i].addr + offset, size_t(chunk), mr && mr->owner == &owner ? mr->pages.get() : nullptr};
    want -= chunk;
    offset = 0;
  }
  return want ? -1 : n;
}

// Bytes [offset, offset + len) of a message when they all lie in its first
// SGE and in pages the engine maps (one SGE on memory the provider shared:
// nearly every message), else nullptr and the general walk runs. The same
// rules as sge_spans and ProcessMemory::transfer, for one span.
[[gnu::always_inline]] inline uint8_t* shared_span_in_first_sge(const Device& dev, const Owner& owner, const abi::Sge* sge,
                                  uint32_t num_sge, uint64_t offset, uint32_t len) {
  if (num_sge == 0 || offset > sge[0].length || len > sge[0].length - offset) return nullptr;
  const Mr* mr = dev.find_mr(sge[0].lkey);
  if (!mr || mr->owner != &owner || !mr->pages) return nullptr;
  const SharedPages& pages = *mr->pages;
  const uint64_t addr = sge[0].addr + offset;
  if (!pages.contains(addr) || len > pages.end() - addr) return nullptr;
  return pages.at(addr);
}

}  // namespace

bool gather_sges(const Device& dev, const Owner& owner, const abi::Sge* sge, uint32_t num_sge,
                 uint64_t offset, uint8_t* dst, uint32_t len) {
  if (const uint8_t* src = shared_span_in_first_sge(dev, owner, sge, num_sge, offset, len)) [[likely]] {
    std::memcpy(dst, src, len);
    return true;
  }
  RemoteSpan spans[kMaxSge];
  const int n = sge_spans(dev, owner, sge, num_sge, offset, len, spans);
  return n >= 0 && owner.mem.read(spans, size_t(n), dst);
}

bool scatter_sges(const Device& dev, const Owner& owner, const abi::Sge* sge, uint32_t num_sge,
                  uint64_t offset, const uint8_t* src, uint32_t len) {
  if (uint8_t* dst = shared_span_in_first_sge(dev, owner, sge, num_sge, offset, len)) [[likely]] {
    std::memcpy(dst, src, len);
    return true;
  }
  RemoteSpan spans[kMaxSge];
  const int n = sge_spans(dev, owner, sge, num_sge, offset, len, spans);
  return n >= 0 && owner.mem.write(spans, size_t(n), src);
}

namespace {

[[gnu::always_inline]] inline void retire_head(Device& dev, Qp& qp, uint32_t status) {
  const uint32_t index = qp.sq_head;
  const abi::SendWqe& w = wqe_at(qp, index);
  const SendWqeState& st = wqe_state(qp, index);
  if (st.internal != InternalWork::kNone) [[unlikely]] {
    if (st.is_rd_atomic && qp.rd_atomic_inflight) --qp.rd_atomic_inflight;
    ++qp.sq_head;
    --qp.sq_internal;
    if (int32_t(qp.sq_next - qp.sq_head) < 0) {
      qp.sq_next = qp.sq_head;
      qp.req_offset = 0;
    }
    tm_internal_done(dev, qp, index, status);  // its slot is read before it is reused
    return;
  }
  const bool report = status != IBV_WC_SUCCESS || qp.sq_sig_all || (w.flags & IBV_SEND_SIGNALED);
  abi::Cqe cqe{};
  if (report) {
    cqe.wr_id = w.wr_id;
    cqe.status = status;
    cqe.opcode = w.flags & abi::kSendFlagMlx5RawWqe ? IBV_WC_DRIVER2 : wc_opcode_for(w.opcode);
    cqe.qp_num = qp.qpn;
    if (w.opcode == IBV_WR_RDMA_READ) cqe.byte_len = uint32_t(st.length);
    // 8 for the atomics, ATOMIC WRITE too (rxe reports its dma.length).
    if (cqe.opcode == IBV_WC_COMP_SWAP || cqe.opcode == IBV_WC_FETCH_ADD ||
        cqe.opcode == IBV_WC_ATOMIC_WRITE)
      cqe.byte_len = 8;
    if (status != IBV_WC_SUCCESS) {
      cqe.vendor_err = status;
      if (status < IBV_WC_REM_INV_REQ_ERR || status == IBV_WC_LOC_PROT_ERR)
        ++dev.counters_mut().local_errors;
      else
        ++dev.counters_mut().remote_errors;
    }
  }
  if (st.is_rd_atomic && qp.rd_atomic_inflight) --qp.rd_atomic_inflight;
  if (st.is_local && st.local_done && st.status == IBV_WC_SUCCESS && qp.locals_unretired) --qp.locals_unretired;
  // Free the slot before the completion is visible: a client that sees the
  // CQE may post into the slot at once (perftest counts on it).
  ++qp.sq_head;
  qp.sq.hdr->consumer.store(++qp.sq_user_head, std::memory_order_release);
  if (int32_t(qp.sq_next - qp.sq_head) < 0) {  // completed what a retransmission was resending
    qp.sq_next = qp.sq_head;
    qp.req_offset = 0;
  }
  if (report && !dev.complete(qp, true, cqe, false)) {
    dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    dev.qp_to_error(qp);
  }
}

// Local WQEs that already ran and now stand at the head: nothing else
// (no ACK, no response) will retire them.
void complete_done_locals(Device& dev, Qp& qp) {
  while (qp.sq_head != qp.sq_fetched && qp.state != IBV_QPS_ERR) {
    const SendWqeState& st = wqe_state(qp, qp.sq_head);
    if (!st.is_local || !st.local_done || st.status != IBV_WC_SUCCESS) return;
    retire_head(dev, qp, IBV_WC_SUCCESS);
  }
}

}  // namespace

void complete_send_head(Device& dev, Qp& qp, uint32_t status) {
  retire_head(dev, qp, status);
  // Only a QP with binds or invalidations outstanding looks further.
  if (qp.locals_unretired && status == IBV_WC_SUCCESS) [[unlikely]] complete_done_locals(dev, qp);
}

namespace {

template <bool kMlx5>
bool requester_run_format(Device& dev, Qp& qp) {
  if (qp.state == IBV_QPS_ERR) {
    uint32_t prod;
    const bool sane = posted_end<kMlx5>(qp, &prod);
    const uint32_t taken = kMlx5 ? qp.sq_user_fetched : qp.sq_user_head;
    const bool rq_empty = qp.rq_mlx5 ? mlx5_rq_waiting(qp) == 0
                                     : qp.rq.hdr->producer.load(std::memory_order_acquire) == qp.rq_head;
    if (sane && prod == taken && rq_empty) return false;
    dev.flush_qp(qp);  // WRs posted in the error state complete flushed
    return true;
  }
  if (qp.state == IBV_QPS_SQD) {
    // SQD: finish the message in progress, start no other (IBA 10.3.1.4),
    // and report SQ_DRAINED once everything started is acknowledged.
    if (!qp.req_offset) {
      if (qp.sqd_notify_pending && qp.sq_head == qp.sq_next) {
        qp.sqd_notify_pending = false;
        dev.post_qp_event(qp, IBV_EVENT_SQ_DRAINED);
        return true;
      }
      return false;
    }
  } else if (qp.state != IBV_QPS_RTS) {
    return false;
  }
  if (qp.rnr_wait_until_ns && dev.now_ns() < qp.rnr_wait_until_ns) return false;
  qp.rnr_wait_until_ns = 0;
  uint32_t prod;
  if (!posted_end<kMlx5>(qp, &prod)) {
    // No completion can describe that, so the QP is fatal (IBA 11.6.2 "local
    // work queue catastrophic").
    ++dev.counters_mut().bad_wqes;
    dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    qp.state = IBV_QPS_ERR;
    if constexpr (kMlx5)
      qp.sq_user_fetched = prod;  // nothing past it can be told apart
    else
      qp.sq.hdr->producer.store(qp.sq_user_fetched, std::memory_order_relaxed);
    dev.flush_qp(qp);
    return true;
  }
  bool work = false;
  for (uint32_t budget = kRequesterBudget;
       budget && (qp.sq_next != qp.sq_fetched || qp.sq_user_fetched != prod); --budget) {
    if (qp.sq_next == qp.sq_fetched) {
      if (!sequence_has_room<kMlx5>(qp)) [[unlikely]] break;
      wqe_state(qp, qp.sq_next).status = IBV_WC_SUCCESS;
      const uint32_t status = fetch_wqe<kMlx5>(dev, qp, qp.sq_next, prod);
      ++qp.sq_fetched;
      if (status != IBV_WC_SUCCESS) wqe_state(qp, qp.sq_next).status = status;
    }
    SendWqeState& st = wqe_state(qp, qp.sq_next);
    abi::SendWqe& w = wqe_at(qp, qp.sq_next);
    if (st.status != IBV_WC_SUCCESS) {
      // Errors complete in order: wait until everything before it has completed.
      if (qp.sq_head != qp.sq_next) break;
      // On a DCI with streams it fails its stream only, while few have (dc.cc).
      const bool qp_fails = !qp.dci_streams || !dev.dci_stream_failed(qp, w);
      ++qp.sq_next;
      complete_send_head(dev, qp, st.status);
      if (qp_fails) dev.qp_to_error(qp);
      return true;
    }
    // Back-pressure: a port's queue is full or buffers are short. The WQE
    // waits (a NIC's send queue does not drop what was posted). Before the
    // checks below, which count a READ or atomic as started.
    if (!st.is_local && !dev.tx_ready()) break;
    if (qp.rate_limit_kbps && dev.now_ns() < qp.pace_next_ns) break;  // packet pacing
    if (is_reliable(qp) && qp.req_offset == 0) {
      if (qp.dc == DcRole::kInitiator && !st.is_local) [[unlikely]] {
        if (!dev.dci_take_target(qp, w, st)) break;  // the previous target's WQEs first
        if (st.status != IBV_WC_SUCCESS) continue;   // completed in order above
      }
      if (psn_diff(qp.req_psn, qp.comp_psn) >= int32_t(kMaxInflightPackets)) break;
      if (st.is_rd_atomic && qp.rd_atomic_inflight >= std::max<uint32_t>(1, qp.max_rd_atomic)) break;
      // IBV_SEND_FENCE: wait for outstanding READs and atomics (IBA 10.8.3.3).
      if ((w.flags & IBV_SEND_FENCE) && qp.rd_atomic_inflight) break;
      if (st.is_rd_atomic) ++qp.rd_atomic_inflight;
    }
    work = true;
    if (st.is_local) [[unlikely]] {
      if (!run_local_wqe(dev, qp, w, st)) continue;  // the error branch above completes it in order
      if (!is_reliable(qp)) complete_unreliable(dev, qp);
      else complete_done_locals(dev, qp);
    } else {
      const bool done = qp.type == IBV_QPT_RAW_PACKET ? raw_send_next(dev, qp) : send_next_packet(dev, qp);
      if (psn_diff(qp.req_psn, qp.req_max_psn) > 0) qp.req_max_psn = qp.req_psn;
      if (done) {
        ++qp.sq_next;
        qp.req_offset = 0;
        if (!is_reliable(qp)) complete_unreliable(dev, qp);
        if (qp.state == IBV_QPS_SQD) break;  // the message in progress is done
      }
    }
    if (qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_SQD) break;
  }
  if (work && is_reliable(qp) && !qp.retrans_deadline_ns && qp.timeout)
    qp.retrans_deadline_ns = dev.now_ns() + (4096ull << qp.timeout);
  if (work && !qp.first_tx_ns) qp.first_tx_ns = dev.now_ns();
  return work;
}

}  // namespace

bool requester_run(Device& dev, Qp& qp) {
  return qp.mlx5 ? requester_run_format<true>(dev, qp) : requester_run_format<false>(dev, qp);
}

// Doorbell order before a control verb: on mlx5 the doorbell of a posted
// WQE reaches the HCA before a later command (ibv_dereg_mr, ...) does, so a
// send posted just before its MR is deregistered still goes out. Taking
// every posted WQE now checks its SGEs against the MRs as they still are and
// turns them into the owner's addresses, which is all a WQE needs of an MR
// once taken (gather_sges reads through the owner's memory).
template <bool kMlx5>
void take_posted_format(Device& dev, Qp& qp) {
  uint32_t prod;
  if (!posted_end<kMlx5>(qp, &prod)) return;  // requester_run makes the QP fatal
  while (qp.sq_user_fetched != prod && sequence_has_room<kMlx5>(qp)) {
    const uint32_t index = qp.sq_fetched++;
    const uint32_t status = fetch_wqe<kMlx5>(dev, qp, index, prod);
    if (status != IBV_WC_SUCCESS) wqe_state(qp, index).status = status;
  }
}

void requester_take_posted(Device& dev, Qp& qp) {
  if (qp.state != IBV_QPS_RTS) return;
  if (qp.mlx5) take_posted_format<true>(dev, qp);
  else take_posted_format<false>(dev, qp);
}

// Points the requester at `psn`: backwards for go-back-N retransmission, or
// forwards when acknowledgements overtook a retransmission in progress.
void position_requester(Qp& qp, uint32_t psn) {
  const uint32_t mtu = qp.mtu_bytes();
  uint32_t idx = qp.sq_head;
  for (; idx != qp.sq_fetched; ++idx) {
    const SendWqeState& st = wqe_state(qp, idx);
    if (!st.started || st.status != IBV_WC_SUCCESS) break;
    if (psn_diff(psn, psn_add(st.first_psn, st.npsn)) < 0) break;
  }
  qp.sq_next = idx;
  qp.req_offset = 0;
  qp.req_psn = psn;
  if (idx != qp.sq_fetched) {
    const SendWqeState& st = wqe_state(qp, idx);
    if (st.started && st.status == IBV_WC_SUCCESS) {
      const int32_t into = std::max<int32_t>(0, psn_diff(psn, st.first_psn));
      const abi::SendWqe& w = wqe_at(qp, idx);
      const bool atomic = w.opcode != IBV_WR_RDMA_READ && is_rd_atomic(w.opcode);  // one PSN each
      qp.req_offset = atomic ? 0 : std::min<uint64_t>(uint64_t(into) * mtu, st.length);
      if (qp.req_offset >= st.length) qp.req_offset = 0;
      qp.req_psn = qp.req_offset ? psn : st.first_psn;
    }
  }
  // READs and atomics before the new position are still outstanding.
  uint32_t inflight = 0;
  for (uint32_t i = qp.sq_head; i != qp.sq_next; ++i) inflight += wqe_state(qp, i).is_rd_atomic;
  if (qp.req_offset && wqe_state(qp, qp.sq_next).is_rd_atomic) ++inflight;
  qp.rd_atomic_inflight = inflight;
}

void rewind_requester(Device& dev, Qp& qp, uint32_t psn) {
  position_requester(qp, psn);
  // The ACK timer restarts when the retransmission goes out (requester_run),
  // not from the original transmission: else it fires right behind a
  // NAK-driven retry and counts a second retry for the same loss.
  qp.retrans_deadline_ns = 0;
  ++qp.retransmits;
  ++dev.counters_mut().retransmits;
}

}  // namespace uroce::device
