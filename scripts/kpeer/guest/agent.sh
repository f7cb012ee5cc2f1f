#!/bin/bash
# The kernel-peer guest's agent: runs each line the host writes on the second serial port
# (ttyS1) as `ID COMMAND`, with /kp/lib.sh sourced, and answers with the command's output
# followed by `KPDONE ID RC`. The host (scripts/kpeer/run.py) waits for that line, so it
# never guesses how long the slow (emulated) guest takes.
stty -F /dev/ttyS1 raw -echo
exec 3<>/dev/ttyS1
echo "KPAGENT READY $(cat /sys/class/infiniband/*/node_type 2>/dev/null | head -1)" >&3
while IFS= read -r line <&3; do
    id=${line%% *}
    cmd=${line#* }
    bash -c ". /kp/lib.sh; $cmd" </dev/null >&3 2>&1
    echo "KPDONE $id $?" >&3
done
