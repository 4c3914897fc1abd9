"""`python -m moye`: the main demo."""
from .examples.demo import main

main()
