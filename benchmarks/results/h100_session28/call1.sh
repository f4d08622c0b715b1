# Session 28, call 1 (run from the project root on the device machine):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/h100_session28/call1.sh
# 1-3: dropout's random numbers drawn by nvFuser (NVFUSER_DTENSOR_RANDOM_IN_FUSIONS=1) on a GPU;
# 4: the channels-last inference default (session 27's patch) on ResNet-18, with its traceback.
nvidia-smi -L
export NVFUSER_DTENSOR_RANDOM_IN_FUSIONS=1
echo "== 1 tests with random numbers in fusions"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_graphs.py::test_dropout_draws_new_numbers_on_every_replay \
  tests/test_models.py::test_dropout_statistics tests/translators/test_creation.py > $OUT/rand_tests.log 2>&1
tail -8 $OUT/rand_tests.log
echo "== 2 bert_dropout kernels per training step"
timeout 150 python3 scripts/gpu_top_kernels.py bert_dropout --backends inductor,nvfuser_dtensor --top 15 > $OUT/top_bert_dropout.log 2>&1
grep -v "^\s*$" $OUT/top_bert_dropout.log | tail -45
echo "== 3 zoo bert_dropout training"
timeout 170 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 1 --models bert_dropout --modes train \
  --backends inductor,nvfuser_dtensor --out $OUT/zoo_dropout > $OUT/zoo_dropout.log 2>&1
cat $OUT/zoo_dropout/summary.md 2>/dev/null | head -20 || tail -20 $OUT/zoo_dropout.log
unset NVFUSER_DTENSOR_RANDOM_IN_FUSIONS
echo "== 4 channels-last inference default, ResNet-18"
patch -p1 < benchmarks/results/h100_session27/channels_last_inference_not_landed.patch > /dev/null
timeout 120 python3 benchmarks/results/h100_session28/probe_channels_last.py resnet18 > $OUT/probe_cl.log 2>&1
grep -v "^\s*$" $OUT/probe_cl.log | tail -60
