"""The sdist, the wheels, the release pipeline, the docs, and the rules of the source tree."""
