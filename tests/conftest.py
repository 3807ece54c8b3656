import sys
from pathlib import Path

# The shared op and defect tables sit next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
