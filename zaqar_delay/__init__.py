"""zaqar-delay: a Zaqar v2 compatible queue service built for delayed delivery."""

__version__ = "0.1.0"
