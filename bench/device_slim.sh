#!/usr/bin/env bash
# Here (not on the device): `bash bench/device_slim.sh on|off|status`.
#
# Every device call carries the whole tracked tree (~55 MiB, mostly the demo model) inside its 64 MiB,
# which left ~3-8 MiB per call for the ~76 MiB MLX-CUDA payload (10-20 staging calls, each a
# transfer of device time). The staging calls only copy a part into /root/stash and need none of the
# tree, so `on` takes the big folders out of the index and ignores them (the files stay on disk,
# untouched) and those calls travel almost empty; `off` puts them back exactly as they were, before
# the call that runs something. bench/device_stage.sh sizes the parts for this
# (SLIM_PARTS=1: all parts but the last sized for a slim tree, the last for the full one).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
paths=(models classifier/data classifier/model bench/results)
exclude="$(git rev-parse --git-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
marker="# device_slim"
list="$(git rev-parse --git-dir)/device_slim.list"   # exactly the files taken out, to put back
case "${1:-status}" in
  on)
    grep -qF "$marker" "$exclude" 2>/dev/null && { echo "already slim"; exit 0; }
    git ls-files -- "${paths[@]}" > "$list"
    git rm -r -q --cached -- "${paths[@]}"
    { echo "$marker begin"; printf '/%s/\n' "${paths[@]}"; echo "$marker end"; } >> "$exclude"
    ;;
  off)
    grep -qF "$marker" "$exclude" 2>/dev/null || { echo "not slim"; exit 0; }
    sed -i "/^$marker begin\$/,/^$marker end\$/d" "$exclude"
    git add -f --pathspec-from-file="$list"
    rm -f "$list"
    ;;
  status)
    grep -qF "$marker" "$exclude" 2>/dev/null && echo slim || echo full
    ;;
  *)
    echo "usage: $0 on|off|status" >&2
    exit 2
    ;;
esac
echo "tracked tree: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes"
