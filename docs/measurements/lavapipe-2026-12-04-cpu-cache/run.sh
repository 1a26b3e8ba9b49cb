#!/bin/bash
# Interleaved before/after on lavapipe: 0b160a2 (base: the form for CPU adapters computes
# every cos/sin) against the change (new: it reads the pass's cache), four rounds, the
# order of the two binaries alternating from round to round.
out=${OUT:-/tmp/m/pairs3.jsonl}; : > $out
for round in 1 2 3 4; do
  if [ $((round % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for p in "phi-2-rope|--model phi-2-rope" "llama3-8b-rope|--model llama3-8b-rope" "qwen2.5-vl-7b-rope|--model qwen2.5-vl-7b-rope" "llama3-8b-step|--model llama3-8b-step" "llama2-13b-step|--model llama2-13b-step"; do
    name=${p%%|*}; args=${p#*|}
    for b in $order; do
      bin=/tmp/posenc-base3; [ $b = new ] && bin=/tmp/posenc-new3
      j=$($bin bench $args --device gpu --repeats 5 --json 2>/dev/null)
      python3 -c "import json,sys; d=json.loads(sys.argv[1]); d['tag']=sys.argv[2]; print(json.dumps(d))" "$j" "$name/$b/$round" >> $out
    done
  done
done
echo done
