"""The queue as clients see it: the protocol, byte for byte against beanstalkd, and its extensions."""
