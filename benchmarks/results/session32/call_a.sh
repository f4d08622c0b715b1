# Session 32, device call A (about 500 s):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session32/call_a.sh > $OUT/call_a.log 2>&1
# 1. every GPU test with NVFUSER_DTENSOR_SPLIT_FAR=1 (six workers): the would-be default, where
#    copies alone no longer join a region (session 31's crashed run joined each group norm's
#    clone into its group norm + SiLU region); beside it, the group-norm timm test at main's
#    defaults in its own process (the one test that crashed in session 31);
# 2. then, nothing else on the GPU, ViT-S/16's and BERT's training-step kernels, one process
#    per arm: main's defaults and NVFUSER_DTENSOR_SPLIT_FAR=1.
nvidia-smi -L
gn=tests/translators/test_normalization.py::test_group_norm_in_a_timm_model
(timeout 240 python3 -m pytest -q -p no:cacheprovider $gn > $OUT/gn_default.log 2>&1
 echo "gn at main's defaults: rc=$? $(tail -1 $OUT/gn_default.log)") &
t0=$(date +%s)
NVFUSER_DTENSOR_SPLIT_FAR=1 timeout -s INT -k 20 300 python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n 6 $(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py > $OUT/gpu_tests_split_far.log 2>&1
echo "== GPU tests, NVFUSER_DTENSOR_SPLIT_FAR=1 ($(( $(date +%s) - t0 )) s)"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests_split_far.log | tail -12
grep -h "Fatal\|Segmentation" $OUT/gpu_tests_split_far.log | sort | uniq -c | head -5
wait
for m in vit_s16 bert; do for arm in NVFUSER_DTENSOR_NONE=0 NVFUSER_DTENSOR_SPLIT_FAR=1; do
  echo "== $m train kernels, $arm"
  env $arm timeout 100 python3 scripts/gpu_top_kernels.py $m --backends nvfuser_dtensor --top 14 > $OUT/top_${m}_${arm#NVFUSER_DTENSOR_}.log 2>&1
  grep -vE "Warning|warn\(" $OUT/top_${m}_${arm#NVFUSER_DTENSOR_}.log | grep -A14 "^==" | cut -c1-170
done; done
