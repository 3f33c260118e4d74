#!/usr/bin/env bash
# tessera-cosmogen: --help names the options and the targets' standardisation; bad values are
# refused (status 2, no file) with the value in the message; the file has the documented datasets,
# shapes and attributes; the same seed writes the same data with 1 and 2 threads, another seed other
# data; segmentation files hold [N, 3, S, S, S] targets.
set -u
. "$(dirname "$0")/script_common.sh"
B=${TESSERA_BUILDDIR:-.}
gen=$B/tessera-cosmogen
command -v h5ls >/dev/null && command -v h5diff >/dev/null || { echo "SKIP: h5ls/h5diff not found (apt-get install hdf5-tools)"; exit 77; }
test_tmp cosmogen

"$gen" --help >"$tmp/help" && grep -q -- "--omega-m" "$tmp/help" && grep -q -- "--redshifts" "$tmp/help" &&
  grep -q "t = 2 (p - min) / (max - min) - 1" "$tmp/help" && ok "--help lists the options and the targets' formula" ||
  ko "--help lists the options and the targets' formula"

# refused: exit status 2, the bad value in the message, nothing written
refuse() { # MESSAGE ARGS...
  local want=$1
  shift
  "$gen" --out "$tmp/bad.h5" --samples 2 -q "$@" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/err" && [ ! -e "$tmp/bad.h5" ] && [ ! -e "$tmp/bad.h5.tmp" ]; then
    ok "refused: $* ($want)"
  else
    ko "refused: $* (status $rc, message: $(cat "$tmp/err"))"
  fi
}
refuse "--size: 3 is out of range" --size 3
refuse "--k-c: '0.5:0.2': the low end is above the high end" --k-c 0.5:0.2
refuse "--omega-m: '0.3:' is not a number" --omega-m 0.3:
refuse "--redshifts: 'x' is not a number" --redshifts 1,x
refuse "--task: 'classify' is not regression or segmentation" --task classify
refuse "omega_m range 0.2:1.5" --omega-m 0.2:1.5
refuse "radius 3:40" --task segmentation --radius 3:40
refuse "chunk 40" --size 32 --chunk 40
refuse "--samples: 0 is out of range" --samples 0

"$gen" --out "$tmp/a.h5" --samples 6 --size 16 --workers 1 -q && ok "writes a regression file" || ko "writes a regression file"
h5ls "$tmp/a.h5" >"$tmp/ls" 2>&1
grep -q "^inputs *Dataset {6, 4, 16, 16, 16}" "$tmp/ls" && grep -q "^targets *Dataset {6, 4, 1, 1}" "$tmp/ls" &&
  grep -q "^params *Dataset {6, 4}" "$tmp/ls" && grep -q "^amplitude *Dataset {6}" "$tmp/ls" &&
  ok "datasets inputs [6, 4, 16, 16, 16], targets [6, 4, 1, 1], params [6, 4], amplitude [6]" ||
  { cat "$tmp/ls"; ko "datasets and shapes of a regression file"; }
h5dump -a /param_names -a /param_units -a /target_transform "$tmp/a.h5" >"$tmp/attrs" 2>&1
grep -q '"omega_m,sigma,n_s,k_c"' "$tmp/attrs" && grep -q '"1,1,1,h/Mpc"' "$tmp/attrs" &&
  grep -q "targets = 2 (p - param_min)" "$tmp/attrs" && ok "parameter names, units and the targets' transform stored" ||
  { cat "$tmp/attrs"; ko "parameter names, units and the targets' transform stored"; }

"$gen" --out "$tmp/b.h5" --samples 6 --size 16 --workers 2 -q && h5diff "$tmp/a.h5" "$tmp/b.h5" >/dev/null &&
  ok "1 and 2 threads write the same data" || ko "1 and 2 threads write the same data"
"$gen" --out "$tmp/c.h5" --samples 6 --size 16 --seed 2 -q
h5diff -q "$tmp/a.h5" "$tmp/c.h5" /inputs /inputs >/dev/null 2>&1 && ko "seeds 1 and 2 write different inputs" ||
  ok "seeds 1 and 2 write different inputs"

"$gen" --out "$tmp/s.h5" --samples 2 --size 16 --task segmentation --radius 2:4 --chunk 8 -q >"$tmp/out" 2>&1
h5ls "$tmp/s.h5" >"$tmp/ls" 2>&1
grep -q "^inputs *Dataset {2, 1, 16, 16, 16}" "$tmp/ls" && grep -q "^targets *Dataset {2, 3, 16, 16, 16}" "$tmp/ls" &&
  ok "segmentation: inputs [2, 1, 16, 16, 16], targets [2, 3, 16, 16, 16]" || { cat "$tmp/out" "$tmp/ls"; ko "segmentation file shapes"; }

tests_done
