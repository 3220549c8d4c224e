# bash completion for uroce: its commands, the options of each (as
# tools/command_line.cc declares them; ctest tool_cli checks they agree),
# engine names for --name and, after `uroce run`, the command's own
# completion. Installed as share/bash-completion/completions/uroce.

_uroce_commands="start stop status stats run env fault capture port bench help"

# The options of each command. start also completes uroced's flags, which
# it passes on.
_uroce_options() {
  case $1 in
    start) echo "--name --ip --mac --port --netdev --users --group --wait --ip6 --cpu --fault --mtu --vlan --hugepages --no-hugepages --help" ;;
    stop) echo "--name --all --help" ;;
    status) echo "--json --help" ;;
    stats) echo "--name --json --watch --interval --count --help" ;;
    run) echo "--all-cpus --without-engine --wait-listen --help" ;;
    env | help) echo "--help" ;;
    fault) echo "--name --port --help" ;;
    capture) echo "--name -w --count --seconds --help" ;;
    port) echo "--name --help" ;;
    bench) echo "--quick --out --no-two-hosts --keep --only --load --against --runs --tolerance --help" ;;
  esac
}

# The engines of a runtime directory (include/uroce/runtime_dir.h's default).
_uroce_engines() {
  local dir=${1:-${UROCE_RUNTIME_DIR:-}} sock
  if [[ -z $dir ]]; then
    if ((EUID == 0)); then
      dir=/run/uroce
    elif [[ -n ${XDG_RUNTIME_DIR:-} ]]; then
      dir=$XDG_RUNTIME_DIR/uroce
    else
      dir=/tmp/uroce-$EUID
    fi
  fi
  for sock in "$dir"/*.sock; do
    [[ -S $sock ]] && basename "$sock" .sock
  done
}

_uroce() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  local i=1 cmd="" runtime_dir=""
  COMPREPLY=()
  # The command: the first word that is neither an option nor its value.
  while ((i < COMP_CWORD)); do
    case ${COMP_WORDS[i]} in
      --runtime-dir) runtime_dir=${COMP_WORDS[i + 1]}; ((i += 2)) ;;
      --runtime-dir=*) runtime_dir=${COMP_WORDS[i]#*=}; ((i += 1)) ;;
      -*) ((i += 1)) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  if [[ -z $cmd ]]; then
    if [[ $prev == --runtime-dir ]]; then
      mapfile -t COMPREPLY < <(compgen -d -- "$cur")
    elif [[ $cur == -* ]]; then
      mapfile -t COMPREPLY < <(compgen -W "--runtime-dir --help --version" -- "$cur")
    else
      mapfile -t COMPREPLY < <(compgen -W "$_uroce_commands" -- "$cur")
    fi
    return
  fi

  if [[ $cmd == run ]]; then
    # Everything from CMD on (or after --) is CMD's: complete it as CMD would.
    local j
    for ((j = i + 1; j < COMP_CWORD; j++)); do
      if [[ ${COMP_WORDS[j]} == -- ]]; then
        ((j += 1))
        break
      fi
      [[ ${COMP_WORDS[j]} == -* ]] || break
    done
    if ((j < COMP_CWORD)) && declare -F _command_offset >/dev/null; then
      _command_offset "$j"
      return
    elif ((j < COMP_CWORD)); then
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return
    elif [[ $cur != -* || ${COMP_WORDS[j - 1]} == -- ]]; then
      mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
      return
    fi
  fi

  # The value of an option.
  case $prev in
    --name)
      mapfile -t COMPREPLY < <(compgen -W "$(_uroce_engines "$runtime_dir")" -- "$cur")
      return ;;
    -w)
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return ;;
    --out)
      mapfile -t COMPREPLY < <(compgen -d -- "$cur")
      return ;;
    --port)
      [[ $cmd == fault ]] && mapfile -t COMPREPLY < <(compgen -W "loopback wire" -- "$cur")
      return ;;
    --netdev)
      mapfile -t COMPREPLY < <(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")
      return ;;
    --cpu)
      mapfile -t COMPREPLY < <(compgen -W "auto none" -- "$cur")
      return ;;
    --users)
      mapfile -t COMPREPLY < <(compgen -u -- "$cur")
      return ;;
    --group)
      mapfile -t COMPREPLY < <(compgen -g -- "$cur")
      return ;;
    --ip | --ip6 | --mac | --fault | --mtu | --vlan | --interval | --count | --seconds | --only)
      return ;;
  esac

  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(_uroce_options "$cmd")" -- "$cur")
    return
  fi
  case $cmd in
    port) mapfile -t COMPREPLY < <(compgen -W "up down" -- "$cur") ;;
    help) mapfile -t COMPREPLY < <(compgen -W "$_uroce_commands" -- "$cur") ;;
    fault)
      mapfile -t COMPREPLY < <(compgen -W "drop= duplicate= reorder= corrupt= delay= seed=" -- "$cur")
      compopt -o nospace 2>/dev/null ;;
  esac
}

complete -F _uroce uroce
