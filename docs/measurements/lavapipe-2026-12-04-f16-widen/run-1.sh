#!/bin/bash
# Interleaved before/after on lavapipe: base (9476ba8) and new binaries, three rounds.
out=/tmp/m/pairs.jsonl; : > $out
for round in 1 2 3; do
  for p in "phi-2-rope|--model phi-2-rope" "llama3-8b-rope-f16|--model llama3-8b-rope --dtype f16" "llama2-13b-step|--model llama2-13b-step" "encode-f16|--dtype f16 --out-dtype f16 --load=false" "llama3-8b-rope|--model llama3-8b-rope"; do
    name=${p%%|*}; args=${p#*|}
    for b in base new; do
      j=$(/tmp/posenc-$b bench $args --device gpu --repeats 5 --json 2>/dev/null)
      python3 -c "import json,sys; d=json.loads(sys.argv[1]); d['tag']=sys.argv[2]; print(json.dumps(d))" "$j" "$name/$b/$round" >> $out
    done
  done
done
echo done
