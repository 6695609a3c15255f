"""``python -m reasoning_core.runtime.tinyworld --config F --out DIR``"""

import sys

from reasoning_core.runtime.tinyworld import main

sys.exit(main())
