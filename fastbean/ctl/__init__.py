"""fastbean-ctl: the admin tool, for fastbean and any beanstalkd (standard
commands only). It never imports the engine."""
from fastbean.ctl.main import main

__all__ = ["main"]
