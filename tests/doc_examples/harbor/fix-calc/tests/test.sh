#!/bin/bash
# The reward: 1 when add sums, else 0.
. /app/calc.sh
if [ "$(add 2 3)" = 5 ] && [ "$(add 10 -4)" = 6 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
