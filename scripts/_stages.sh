# Shared by scripts/test and .ci/run: `stage NAME CMD…` runs CMD, prints how long it took and how
# it ended, and appends that line to $ALPSTORE_STAGE_LOG (when set) for the summary at the end.
# Returns CMD's status, so `stage … || status=$?` keeps going where a failure should not stop.
stage() {
  local name=$1 started=$SECONDS rc=0 line
  shift
  echo "== $name"
  "$@" || rc=$?
  line=$(printf '%-32s %5d s  %s' "$name" $((SECONDS - started)) \
    "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")")
  echo "== $line"
  if [ -n "${ALPSTORE_STAGE_LOG:-}" ]; then echo "$line" >>"$ALPSTORE_STAGE_LOG"; fi
  return "$rc"
}
