# Shared by scripts/up and scripts/restart (sourced, not run): how a local service is started,
# how its readiness and its ports are checked, and which PUSH_UP_* variable moves each port.
# Expects VAR (the state directory) to be set.

# Which variable to change for a port, by the role the port plays.
declare -A PORT_VARIABLE=(
  [grpc]=PUSH_UP_GRPC_PORT [sim-production]=PUSH_UP_SIM_PRODUCTION_PORT [sim-sandbox]=PUSH_UP_SIM_SANDBOX_PORT
  [sim-admin]=PUSH_UP_SIM_ADMIN_PORT [registration-admin]=PUSH_UP_REGISTRATION_ADMIN_PORT
  [dispatcher-admin]=PUSH_UP_DISPATCHER_ADMIN_PORT [sim-metrics-admin]=PUSH_UP_SIM_METRICS_ADMIN_PORT
)

# The pids listening on 127.0.0.1/0.0.0.0/[::] TCP port $1 (one per line; empty when none).
port_owners() {
  ss -ltnpH "( sport = :$1 )" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u
}

# "pid 123 (dispatcher)" for each owner of port $1.
describe_owners() {
  local pid out=""
  for pid in $(port_owners "$1"); do out+="pid $pid ($(tr -d '\0' <"/proc/$pid/comm" 2>/dev/null || echo '?')) "; done
  echo "${out% }"
}

# Fails (exit 1) when TCP port $2 (role $1) is taken, naming the owner and the variable to change.
require_free_port() {
  local role=$1 port=$2
  if ss -ltnH "( sport = :$port )" 2>/dev/null | grep -q .; then
    local owners; owners=$(describe_owners "$port")
    echo "up: port $port ($role) is already in use${owners:+ by $owners}: set ${PORT_VARIABLE[$role]}=<free port> (and the same for scripts/down), or stop that process" >&2
    exit 1
  fi
}

# Starts "$@" in the background as service $name ($1), logging to $VAR/log/NAME.log (a new log: what
# scripts/up reads from it, such as the broker's control port, is this start's), its pid in
# $VAR/run/NAME.pid. Its environment and command line are kept (mode 600) in $VAR/run/NAME.env and
# NAME.cmd so that scripts/restart can start it again the same way.
start_service() {
  local name=$1; shift
  ( umask 077
    env -0 >"$VAR/run/$name.env"
    printf '%s\0' "$@" >"$VAR/run/$name.cmd" )
  nohup "$@" >"$VAR/log/$name.log" 2>&1 </dev/null &
  echo $! >"$VAR/run/$name.pid"
}

# Starts service $1 again (its log continues) from its saved environment and command line; the
# VAR=VALUE arguments after it are set on top of the saved environment for this start only (the saved
# files are not changed, so the next restart without them goes back to scripts/up's settings).
restart_service() {
  local name=$1; shift
  [ -f "$VAR/run/$name.cmd" ] && [ -f "$VAR/run/$name.env" ] || { echo "restart: $name was not started by scripts/up in $VAR" >&2; exit 1; }
  local -a command environment
  mapfile -d '' command <"$VAR/run/$name.cmd"
  mapfile -d '' environment <"$VAR/run/$name.env"
  # env(1) applies its assignments in order: an override given here wins over the saved value.
  nohup env -i "${environment[@]}" "$@" "${command[@]}" >>"$VAR/log/$name.log" 2>&1 </dev/null &
  echo $! >"$VAR/run/$name.pid"
}

# Waits until service $1 (pid in its pid file) answers 200 on the admin port of its first
# "role=port" argument (http://127.0.0.1:PORT/readyz) and owns every "role=port" given; fails naming what went wrong: the process exited (last log lines,
# the variable to change when a port was taken), another process answers on its port, or a timeout.
wait_service_ready() {
  local name=$1; shift
  local admin_port=${1#*=}
  local pid; pid=$(cat "$VAR/run/$name.pid")
  local deadline=$((SECONDS + ${PUSH_UP_READY_TIMEOUT_S:-60}))
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "up: $name (pid $pid) exited during start; last lines of $VAR/log/$name.log:" >&2
      tail -n 5 "$VAR/log/$name.log" >&2
      local spec
      for spec in "$@"; do
        local role=${spec%%=*} port=${spec#*=}
        if [ -n "$(port_owners "$port")" ]; then
          echo "up: port $port is held by $(describe_owners "$port"): set ${PORT_VARIABLE[$role]:-its PUSH_UP_* variable}=<free port>" >&2
        fi
      done
      exit 1
    fi
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$admin_port/readyz" 2>/dev/null)" = 200 ]; then
      local spec wrong=""
      for spec in "$@"; do
        local role=${spec%%=*} port=${spec#*=}
        if ! port_owners "$port" | grep -qx "$pid"; then
          wrong+="up: port $port ($role) is answered by $(describe_owners "$port"), not by $name (pid $pid): set ${PORT_VARIABLE[$role]}=<free port>"$'\n'
        fi
      done
      if [ -n "$wrong" ]; then printf '%s' "$wrong" >&2; exit 1; fi
      return 0
    fi
    sleep 0.2
  done
  echo "up: $name (pid $pid) not ready within ${PUSH_UP_READY_TIMEOUT_S:-60} s (http://127.0.0.1:$admin_port/readyz):" >&2
  curl -s --max-time 2 "http://127.0.0.1:$admin_port/readyz" >&2 || true
  tail -n 5 "$VAR/log/$name.log" >&2
  exit 1
}
