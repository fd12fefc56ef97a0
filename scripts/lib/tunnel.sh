# Sourced by the scripts that run latebind's real daemons over veth links between two
# network namespaces of their own (bench-tunnel.sh, mtu-shrink.sh). Needs root, and
# `bin` set to the latebind binary. Everything it makes is removed on exit.
#
#   tunnel_net PREFIX COUNT BASE   namespaces $C and $S; veths c$i (198.18.BASE+i.2/24, in
#                                  $C) and s$i (.1, in $S) for i in 0..COUNT-1, up
#   tunnel_start LINKS BASE CONF   keys, the daemons' files in $dir (CONF: lines for
#                                  both main sections), LINKS links over the first veths;
#                                  starts both daemons and waits for the session

dir=$(mktemp -d)
pids=""
C=""; S=""
tunnel_cleanup() {
  set +e
  [ -n "$pids" ] && kill $pids 2>/dev/null; sleep 0.3; [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  [ -n "$C" ] && ip netns del "$C" 2>/dev/null; [ -n "$S" ] && ip netns del "$S" 2>/dev/null
  rm -rf "$dir"
}
trap tunnel_cleanup EXIT INT TERM

tunnel_net() {
  local prefix=$1 count=$2 base=$3 id=$$ i
  C=$prefix-c$id; S=$prefix-s$id
  ip netns add "$C"; ip netns add "$S"
  ip -n "$C" link set lo up; ip -n "$S" link set lo up
  for i in $(seq 0 $((count - 1))); do
    ip link add "${prefix}c$i$id" type veth peer name "${prefix}s$i$id"
    ip link set "${prefix}c$i$id" netns "$C" name "c$i"; ip link set "${prefix}s$i$id" netns "$S" name "s$i"
    ip -n "$C" addr add "198.18.$((base + i)).2/24" dev "c$i"; ip -n "$S" addr add "198.18.$((base + i)).1/24" dev "s$i"
    ip -n "$C" link set "c$i" up; ip -n "$S" link set "s$i" up
  done
}

tunnel_start() {
  local links=$1 base=$2 conf=$3 i ck cp sk sp
  ck=$("$bin" genkey); cp=$(echo "$ck" | "$bin" pubkey)
  sk=$("$bin" genkey); sp=$(echo "$sk" | "$bin" pubkey)
  cat > "$dir/server.toml" <<EOT
[server]
private_key = "$sk"
listen = ["0.0.0.0:51820"]
address = "10.77.0.1/24"
control_socket = "$dir/server.sock"
$conf
[[peers]]
public_key = "$cp"
address = "10.77.0.2"
EOT
  cat > "$dir/client.toml" <<EOT
[client]
private_key = "$ck"
server_public_key = "$sp"
address = "10.77.0.2/24"
control_socket = "$dir/client.sock"
$conf
EOT
  for i in $(seq 0 $((links - 1))); do
    printf '[[links]]\nname = "%s"\ninterface = "c%d"\nserver = "198.18.%d.1:51820"\n' \
      "$(printf "\\x$(printf %x $((97 + i)))")" "$i" "$((base + i))" >> "$dir/client.toml"
  done
  ip netns exec "$S" "$bin" server --config "$dir/server.toml" 2>"$dir/server.log" & pids="$!"
  sleep 0.2
  ip netns exec "$C" "$bin" client --config "$dir/client.toml" 2>"$dir/client.log" & pids="$pids $!"
  for _ in $(seq 50); do
    "$bin" status --json --socket "$dir/client.sock" 2>/dev/null | grep -q '"established":true' && return 0
    sleep 0.1
  done
  echo "tunnel: no session after 5 s" >&2
  return 1
}
