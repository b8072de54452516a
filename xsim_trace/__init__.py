"""xsim: trace-driven simulation of LLM training iterations on heterogeneous GPU clusters."""

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
