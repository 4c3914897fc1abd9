"""`python -m moye`: the main demo."""
from .examples.layout_tour import main

main()
