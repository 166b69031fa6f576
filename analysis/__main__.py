"""``python -m analysis`` lists the command lines of this package."""
import analysis

print(analysis.__doc__)
