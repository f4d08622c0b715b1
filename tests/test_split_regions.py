"""Note [Unrelated work in separate regions] (partition.py): a region is one connected piece."""

import pytest
import torch

from helpers import DEVICE, check_parity, region_count


def _bias_grads(a, b, c):
    # three unrelated sums over tokens, as at the end of a backward
    return a.sum(0, keepdim=True), (b * 2).sum(0, keepdim=True), c.exp().sum(0)


def _shared_input(a):
    # two reductions of one tensor stay together: it is read once
    return a.sum(0), a.amax(1)


@pytest.mark.parametrize("split, regions", [(True, 3), (False, 1)])
def test_unrelated_work_gets_regions_of_its_own(split, regions):
    args = [torch.randn(64, 48, device=DEVICE, dtype=torch.bfloat16) for _ in range(3)]
    check_parity(_bias_grads, *args, split_regions=split)
    assert region_count() == regions


def test_work_reading_one_tensor_stays_in_one_region():
    check_parity(_shared_input, torch.randn(64, 48, device=DEVICE))
    assert region_count() == 1
