# Session 31, device call 3 (about 200 s): call B's GPU test failures again.
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session31/call_c.sh > $OUT/call_c.log 2>&1
# - test_group_norm_in_a_timm_model's worker died of a segmentation fault inside nvFuser's
#   execute (a forward region's first run, EfficientNet-B0 with group norms) at 1c8a6a0's
#   defaults. Three arms, each in its own process: the defaults (patch convolutions now k >= 2
#   only, so its 1 x 1 convolutions stay convolutions), regions not cut where far apart, and
#   neither (session 30's defaults, where it passed).
# - the input-free layout test (its zeros were made on the CPU: the test's fault) and the
#   patch-convolution tests.
nvidia-smi -L
gn=tests/translators/test_normalization.py::test_group_norm_in_a_timm_model
arm() { env $2 timeout 175 python3 -m pytest -q -p no:cacheprovider $gn > $OUT/gn_$1.log 2>&1; echo "gn $1 ($2): rc=$? $(tail -1 $OUT/gn_$1.log)"; }
arm default NVFUSER_DTENSOR_NONE=0 &
arm no_split_far NVFUSER_DTENSOR_SPLIT_FAR=0 &
arm neither "NVFUSER_DTENSOR_SPLIT_FAR=0 NVFUSER_DTENSOR_PATCH_CONV_AS_MM=0" &
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_patch_convolution.py "tests/test_layouts.py::test_input_free_values_read_by_regions_are_made_inside_with_the_switch" > $OUT/tests.log 2>&1; echo "tests: $(tail -1 $OUT/tests.log)"
wait
grep -h "Fatal\|Segmentation\|Error" $OUT/gn_*.log | sort | uniq -c | head
