"""``python -m reasoning_core.runtime.report plot|summary ...``"""

import sys

from reasoning_core.runtime.report import main

sys.exit(main())
