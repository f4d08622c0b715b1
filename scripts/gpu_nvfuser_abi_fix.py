"""Fix the one c10d layout change between the nvFuser wheel's torch (2.10) and the device's (2.11).

    python3 scripts/gpu_nvfuser_abi_fix.py [LIB]  # on the GPU machine, after `source .device/setup.sh`

Note [nvFuser wheel on a newer torch]
The staged wheel (nvfuser-cu130-torch210, 0.2.36) was compiled against torch 2.10's headers;
the GPU machine has torch 2.11. torch 2.11 added a member to ``c10d::Backend::Options``
(``std::string group_desc``, after ``group_name``), so ``ProcessGroupNCCL::Options`` grew
from 0xd0 to 0xf8 bytes. nvFuser's ``Communicator::getBackendForTeam`` allocates it with the
size it was compiled with (``mov $0xe0,%edi; call operator new``) and then calls torch
2.11's constructor, which writes up to offset 0xf4: past the block, over the next heap
chunk's header. That is the heap corruption seen on the H200 in every multidevice
execution and at exit (``corrupted size vs. prev_size``, ``double free or corruption``,
``free(): invalid pointer``, backtraces through ``~ProcessGroupNCCL``). nvFuser never reads
the Options fields itself (the constructor, the users and the destructor are torch's), so
allocating 0x100 bytes at that one call site is a complete fix. Nothing else in the c10d
classes nvFuser uses changed layout (headers compared; ``ProcessGroupNCCL`` itself is
0x458 bytes in both).

This patches the staged copy on the GPU machine only (the package never touches nvFuser):
users install a wheel built for their torch. The site is checked byte for byte and the
script refuses any other binary.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

SITE = 0xF2FA51  # in Communicator::getBackendForTeam (file offset == address in this .so)
OLD = bytes.fromhex("bfe0000000")  # mov $0xe0,%edi  (the 2.10 size, rounded by the compiler)
NEW = bytes.fromhex("bf00010000")  # mov $0x100,%edi (>= torch 2.11's 0xf8)
# What follows: call operator new; xor %esi,%esi; mov %rax,%rdi; mov %rax,%r13;
# call ProcessGroupNCCL::Options::Options(bool)
CONTEXT = bytes.fromhex("e815917cff" "31f6" "4889c7" "4989c5" "e8d8a37cff")


def library() -> Path:
    spec = importlib.util.find_spec("nvfuser_common")  # finds it without importing nvFuser
    if spec is None or not spec.submodule_search_locations:
        sys.exit("nvfuser_common not found (source .device/setup.sh first)")
    return Path(list(spec.submodule_search_locations)[0]) / "lib" / "libnvfuser_codegen.so"


def main() -> int:
    if torch.__version__.split("+")[0].split(".")[:2] == ["2", "10"]:
        print("torch 2.10: the wheel's own torch, nothing to fix")
        return 0
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else library()
    with open(path, "r+b") as f:
        f.seek(SITE)
        found = f.read(len(OLD) + len(CONTEXT))
        if found[len(OLD):] != CONTEXT or found[:len(OLD)] not in (OLD, NEW):
            print(f"{path}: not the nvFuser 0.2.36 binary this fix is for; left alone", file=sys.stderr)
            return 1
        if found[:len(OLD)] == NEW:
            print(f"{path}: already fixed (ProcessGroupNCCL::Options allocated with 0x100 bytes)")
            return 0
        f.seek(SITE)
        f.write(NEW)
    print(f"{path}: ProcessGroupNCCL::Options now allocated with 0x100 bytes (was 0xe0; torch "
          f"{torch.__version__} needs 0xf8), see Note [nvFuser wheel on a newer torch]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
