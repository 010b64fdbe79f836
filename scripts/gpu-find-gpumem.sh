# Sourced by the GPU check scripts: sets BIN to the gpumem binary to test (the path given, else the first of
# .device/mon, build-mon, build), or exits 1 naming the script; puts BIN's folder on LD_LIBRARY_PATH, where a
# .device build carries the cpp-httplib that gpumem-exporter needs. Usage: find_gpumem NAME "${1:-}"
find_gpumem() {
  local name=$1 c
  BIN=${2:-}
  for c in "$BIN" .device/mon/gpumem build-mon/gpumem build/gpumem; do
    if [[ -n "$c" && -x "$c" ]]; then BIN=$c; break; fi
  done
  [[ -x "$BIN" ]] || { echo "$name: no gpumem binary (build it or pass its path)"; exit 1; }
  export LD_LIBRARY_PATH="$(dirname "$BIN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
