"""`python -m voda.backends.local zygote [MODULE...]`: the fork launcher (see `zygote`).

The backend starts it itself; it reads requests on stdin and answers on stdout.
"""

import sys

from voda.backends.local.zygote import zygote_main

if __name__ == "__main__":
    if sys.argv[1:2] == ["zygote"]:
        sys.exit(zygote_main(sys.argv[2:]))
    sys.exit("usage: python -m voda.backends.local zygote [MODULE...]")
