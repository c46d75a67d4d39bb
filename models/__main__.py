"""`python -m specdec.models` runs the recipe (see models/recipe.py)."""

import sys

from .recipe import main

sys.exit(main())
