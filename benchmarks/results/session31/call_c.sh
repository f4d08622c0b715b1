# Prepared in session 31 for the next device session (about 200 s; it found no device time left):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session31/call_c.sh > $OUT/call_c.log 2>&1
# - test_group_norm_in_a_timm_model's worker died of a segmentation fault inside nvFuser's
#   execute (a forward region's first run, EfficientNet-B0 with group norms) at 82e9091, where
#   NVFUSER_DTENSOR_SPLIT_FAR was on and 1 x 1 convolutions became matrix products. Main now
#   has the split off and the patch rewrite at k >= 2 only. Two arms, each in its own process:
#   main's defaults (expected to pass, as in session 30), and the split on (the suspect alone).
# - the input-free layout test (its zeros were made on the CPU: the test's fault, fixed) and
#   the patch-convolution tests.
nvidia-smi -L
gn=tests/translators/test_normalization.py::test_group_norm_in_a_timm_model
arm() { env $2 timeout 175 python3 -m pytest -q -p no:cacheprovider $gn > $OUT/gn_$1.log 2>&1; echo "gn $1 ($2): rc=$? $(tail -1 $OUT/gn_$1.log)"; }
arm default NVFUSER_DTENSOR_NONE=0 &
arm split_far NVFUSER_DTENSOR_SPLIT_FAR=1 &
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_patch_convolution.py "tests/test_layouts.py::test_input_free_values_read_by_regions_are_made_inside_with_the_switch" > $OUT/tests.log 2>&1; echo "tests: $(tail -1 $OUT/tests.log)"
wait
grep -h "Fatal\|Segmentation\|Error" $OUT/gn_*.log | sort | uniq -c | head
