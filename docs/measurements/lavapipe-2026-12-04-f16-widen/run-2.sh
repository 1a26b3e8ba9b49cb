#!/bin/bash
# Interleaved before/after on lavapipe: 9476ba8 (base) against HEAD (new), four rounds,
# the order of the two binaries alternating from round to round.
out=${OUT:-/tmp/m/pairs2.jsonl}; : > $out
for round in 1 2 3 4; do
  if [ $((round % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for p in "phi-2-rope|--model phi-2-rope" "llama3-8b-rope-f16|--model llama3-8b-rope --dtype f16" "encode-f16|--dtype f16 --out-dtype f16 --load=false"; do
    name=${p%%|*}; args=${p#*|}
    for b in $order; do
      bin=/tmp/posenc-base; [ $b = new ] && bin=/tmp/posenc-new2
      j=$($bin bench $args --device gpu --repeats 5 --json 2>/dev/null)
      python3 -c "import json,sys; d=json.loads(sys.argv[1]); d['tag']=sys.argv[2]; print(json.dumps(d))" "$j" "$name/$b/$round" >> $out
    done
  done
done
echo done
