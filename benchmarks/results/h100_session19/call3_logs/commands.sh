d=benchmarks/results/h200_models_session19
(timeout 200 python3 scripts/gpu_accumulate_alone.py efficientnet_b0 --arm plain --steps 2 2>&1 | grep -vE "Warning|warn\(" | tail -12 > $OUT/fixed_plain.log) &
(timeout 200 python3 scripts/gpu_accumulate_alone.py efficientnet_b0 --arm graphs --steps 2 2>&1 | grep -vE "Warning|warn\(" | tail -12 > $OUT/fixed_graphs.log) &
for f in bn_silu_mean_56_then_28 bn_silu_mean_28_then_56; do echo "== shared $f (nvFuser's default: kernel reuse)"; CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 scripts/region_replay.py run $d/$f.jsonl --shared 2>&1 | tail -3 | cut -c1-400; done
echo "== shared 56_then_28, NVFUSER_DISABLE=kernel_reuse"; NVFUSER_DISABLE=kernel_reuse CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 scripts/region_replay.py run $d/bn_silu_mean_56_then_28.jsonl --shared 2>&1 | tail -3 | cut -c1-400
echo "== standalone repros"; for c in bn_silu_mean_28 bn_silu_mean_56_28 bn_silu_mean_56_28_no_reuse; do CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 -m tools.nvfuser_repros --case $c 2>&1 | grep -E "bn_silu|Error|error" | head -3 | cut -c1-300; done
wait
echo "== accumulation with the fix (no kernel reuse), plain"; cat $OUT/fixed_plain.log | cut -c1-300
echo "== graphs"; cat $OUT/fixed_graphs.log | cut -c1-300
