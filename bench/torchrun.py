"""torchrun.py: Debian's torchrun (torch 1.13) with one fix, so it runs on
Python 3.11.

    /usr/bin/python3 bench/torchrun.py --nproc_per_node 2 script.py [args]

Python 3.11 no longer yields an IntFlag's zero member (Std.NONE) or its
aliases (Std.ALL) when iterating the class, so torch's Std.from_str("0")
returns None and torchrun dies before starting any worker.  Std(int(v))
looks the value up directly; everything else is torch.distributed.run as
shipped.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api
from torch.distributed.run import main


def from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(from_str)

if __name__ == "__main__":
    sys.argv[0] = "torchrun"
    sys.exit(main())
