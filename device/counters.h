// Every drop and error reason is a named counter with a description, shown by
// `uroce stats` (Seastar's practice).
#pragma once

#include <cstdint>

namespace uroce::device {

#define UROCE_COUNTERS(X)                                                        \
  X(rx_packets, "frames received from a port")                                   \
  X(tx_packets, "frames sent to a port")                                         \
  X(tx_acks, "RC ACKs and NAKs sent (one ACK answers the requests a QP received in one burst)") \
  X(tx_port_down, "frames dropped: port administratively down")                  \
  X(tx_no_route, "frames dropped: destination GID is not IPv4 or no wire port")  \
  X(tx_backpressure, "times a sender waited: loopback or wire TX queue full, or packet buffers short") \
  X(loopback_overflow, "loopback frames dropped: its ring full (only ACKs and NAKs can get there)") \
  X(no_packet_buffer, "frames dropped or not built: every packet buffer in use (packet_buffers_max)") \
  X(rx_not_for_us, "wire frames dropped: not to our MAC and IP")                 \
  X(rx_kernel, "wire frames left to the kernel: not RoCE (no UDP port 4791), on an interface the kernel shares") \
  X(rx_before_filter, "wire frames discarded at start: queued by the port's packet socket before its filter (the link's own traffic)") \
  X(wire_wakeups, "frames that woke the sleeping engine (af_packet wire: RoCE, ARP, ND; all with flow rules)") \
  X(neigh_kernel_asked, "neighbours the kernel was asked to resolve (--netdev: RTM_NEWNEIGH, NTF_USE)") \
  X(neigh_requests_sent, "ARP requests and neighbour solicitations the device sent itself") \
  X(rx_parse_errors, "frames dropped: malformed Ethernet/IP/UDP/BTH or bad ICRC")\
  X(rx_no_qp, "requests dropped: destination QP does not exist")                 \
  X(rx_gsi_dropped, "QP1 packets dropped: not a UD SEND of one MAD with the GSI Q_Key") \
  X(rx_bad_state, "packets dropped: QP not in a state that receives")            \
  X(rx_bad_transport, "packets dropped: opcode not of the QP's transport")       \
  X(rx_bad_qkey, "UD datagrams dropped: Q_Key mismatch")                         \
  X(rx_ud_no_recv, "UD/UC messages dropped: no receive WQE posted")              \
  X(rx_ud_too_long, "UD datagrams dropped: longer than the receive buffer")      \
  X(rx_mcast_no_group, "multicast datagrams dropped: no QP of ours in the group") \
  X(rx_duplicate, "RC duplicate requests answered again")                        \
  X(rx_out_of_seq, "RC requests dropped: PSN ahead of expected (NAK sent)")      \
  X(response_queue_full, "RC answers dropped: the responder's queue full (asked again by the requester)") \
  X(rx_stale_response, "responses dropped: PSN outside the outstanding window")  \
  X(first_contact_retries, "local ACK timeouts before the peer answered once, not counted against retry_cnt (device/params.h)") \
  X(rnr_nak_sent, "RNR NAKs sent: no receive WQE")                               \
  X(rnr_nak_received, "RNR NAKs received")                                       \
  X(nak_sent, "NAKs sent other than RNR")                                        \
  X(retransmits, "requester go-back-N retransmissions")                          \
  X(retry_exceeded, "QPs failed with RETRY_EXC_ERR")                             \
  X(rnr_retry_exceeded, "QPs failed with RNR_RETRY_EXC_ERR")                     \
  X(local_errors, "work requests completed with a local error status")           \
  X(remote_errors, "work requests completed with a remote error status")         \
  X(cq_overflows, "CQs that overflowed (IBV_EVENT_CQ_ERR)")                      \
  X(cq_overruns_ignored, "completions dropped by a full CQ made with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN") \
  X(bad_wqes, "malformed work requests in shared memory")                        \
  X(memory_faults, "client memory not reachable (unmapped or process gone)")     \
  X(async_events_dropped, "async events not delivered: client pipe full")       \
  X(tm_matched, "tag matching: messages placed in a tagged buffer")            \
  X(tm_unexpected, "tag matching: tagged messages that matched no tag")         \
  X(tm_no_tag, "tag matching: NO_TAG (and FIN, short) messages")               \
  X(tm_sync_requests, "tag matching: completions asking software to sync")      \
  X(tm_rndv_reads, "tag matching: rendezvous RDMA READs the device issued")     \
  X(tm_rndv_software, "tag matching: matched rendezvous left to software")       \
  X(tm_rndv_errors, "tag matching: rendezvous READs that failed")               \
  X(raw_tx_frames, "frames raw packet QPs sent")                                \
  X(raw_tx_no_port, "raw frames dropped: no rule took them and no wire port")   \
  X(raw_rx_frames, "frames placed in raw packet QPs' receives")                 \
  X(raw_rx_no_recv, "raw frames dropped: no receive WQE posted")                \
  X(raw_rx_bad_state, "raw frames dropped: target QP not in RTR or RTS")        \
  X(raw_rx_too_long, "raw frames completed with LOC_LEN_ERR: buffer too short") \
  X(flow_trapped, "frames flow steering rules took from the engine or wire")    \
  X(flow_dropped, "frames an IBV_FLOW_SPEC_ACTION_DROP rule discarded")         \
  X(wq_rx_frames, "frames placed in receive WQs' receives (RSS)")               \
  X(wq_rx_no_recv, "frames receive WQs dropped: no receive WQE posted")         \
  X(wq_rx_not_ready, "frames receive WQs dropped: WQ not in RDY")               \
  X(wq_delay_drop_expired, "frames delay drop held past its timeout, dropped")   \
  X(dc_bad_key, "DC requests dropped: not the DCT's access key")                 \
  X(dc_no_context, "DC requests dropped: no connection from that DCI, and no connect") \
  X(dc_stale, "DC requests dropped: of an earlier connection of their DCI")     \
  X(dc_contexts_created, "DC connections a DCT took (responder contexts made)")  \
  X(dc_contexts_evicted, "DC responder contexts let go for a new DCI (the DCT's limit)") \
  X(dc_contexts_restored, "DC responder contexts made again from what the DCT kept of them") \
  X(dc_reconnects, "DCI target changes (a new connection each)")

struct Counters {
#define UROCE_COUNTER_FIELD(name, desc) uint64_t name = 0;
  UROCE_COUNTERS(UROCE_COUNTER_FIELD)
#undef UROCE_COUNTER_FIELD
};

}  // namespace uroce::device
