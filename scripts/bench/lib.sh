# Shared by the bench and soak scripts (sourced, not run).
# Needs: TMP (a private temporary directory), BENCH (the bench binary), log();
# MOSQUITTO (the broker's path) for start_broker.
# Sets: ADDRESS, DAEMON_PID, SIM_PID; PORT, BROKER_PID.

# start_daemon: a private dbus-daemon with generous limits (floods of signals).
start_daemon() {
  cat >"$TMP/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=$TMP/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
  <limit name="max_incoming_bytes">1000000000</limit>
  <limit name="max_outgoing_bytes">1000000000</limit>
  <limit name="max_message_size">1000000000</limit>
  <limit name="max_replies_per_connection">50000</limit>
  <limit name="max_match_rules_per_connection">50000</limit>
</busconfig>
EOF
  rm -f "$TMP/address"
  dbus-daemon --config-file="$TMP/bus.conf" --nofork --print-address=3 3>"$TMP/address" 2>"$TMP/daemon.err" &
  DAEMON_PID=$!
  for _ in $(seq 100); do [[ -s $TMP/address ]] && break; sleep 0.05; done
  ADDRESS=$(head -n 1 "$TMP/address")
  [[ -n $ADDRESS ]] || { log "dbus-daemon did not start"; cat "$TMP/daemon.err" >&2; exit 1; }
}

# start_sim D: the simulator with D devices; waits for READY.
start_sim() {
  mkfifo "$TMP/sim.in"
  "$BENCH" bluez-sim --address "$ADDRESS" --devices "$1" <"$TMP/sim.in" >"$TMP/sim.out" 2>"$TMP/sim.err" &
  SIM_PID=$!
  exec 7>"$TMP/sim.in"
  for _ in $(seq 1200); do grep -qx READY "$TMP/sim.out" && return 0; kill -0 "$SIM_PID" 2>/dev/null || break; sleep 0.05; done
  log "simulator not ready:"; cat "$TMP/sim.err" >&2; exit 1
}
stop_sim() {
  echo quit >&7 || true
  exec 7>&-
  wait "$SIM_PID" 2>/dev/null || true
  SIM_PID=""
  rm -f "$TMP/sim.in"
}


# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# start_broker: a private mosquitto on a free loopback port, nothing kept
# (no persistence, no queue limit for a slow subscriber).
start_broker() {
  PORT=$(free_port)
  {
    echo "listener $PORT 127.0.0.1"
    echo "persistence false"
    echo "allow_anonymous true"
    echo "max_queued_messages 0"
    [[ $(id -u) == 0 ]] && echo "user root"
  } >"$TMP/mosquitto.conf"
  "$MOSQUITTO" -c "$TMP/mosquitto.conf" >"$TMP/mosquitto.log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.05; done
  (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || { log "mosquitto did not start:"; cat "$TMP/mosquitto.log" >&2; exit 1; }
}
