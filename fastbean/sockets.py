"""Listening sockets as beanstalkd makes them; socket activation; -u; fd limits."""
import errno
import logging
import os
import socket
import stat
from typing import NamedTuple

from fastbean.config import BACKLOG, DEFAULT_PORT, UNIX
from fastbean.errors import EXIT_LISTEN, EXIT_NO_USER, EXIT_SETUID, ConfigError
from fastbean.logs import event

SD_LISTEN_FDS_START = 3
HINTS = {
    errno.EADDRINUSE: "; is another server listening there?",
    errno.EACCES: "; ports below 1024 need root or CAP_NET_BIND_SERVICE",
    errno.EADDRNOTAVAIL: "; no interface of this machine has that address",
}
TLS_FD_NAME = "tls"         # systemd's FileDescriptorName= of an inherited socket that speaks TLS
UNIX_PATH_MAX = 107


class Listener(NamedTuple):
    """A listening socket for beanstalk clients, and whether it speaks TLS."""
    sock: socket.socket
    tls: bool


def raise_nofile_limit():
    """Raise the soft open-files limit as far as the hard limit allows."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as e:
            event(logging.WARNING, "nofile-limit", "cannot raise the open-files limit to %(limit)d: "
                  "%(error)s", limit=hard, error=str(e))


def _inherited(config):
    # systemd socket activation: fds from 3 on, if they are meant for us. A
    # socket whose FileDescriptorName= is "tls" speaks TLS.
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        n = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        n = 0
    names = os.environ.get("LISTEN_FDNAMES", "").split(":")
    for var in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(var, None)
    if n < 1:
        return None
    if config.listen_addr is not None:
        event(logging.WARNING, "socket-activation", "inherited listen fd; ignoring option: -l "
              "%(ignored)s", ignored=config.listen_addr)
    if config.port != DEFAULT_PORT:
        event(logging.WARNING, "socket-activation", "inherited listen fd; ignoring option: -p "
              "%(ignored)s", ignored=config.port)
    for flag, addresses in (("--listen", config.listen), ("--tls-listen", config.tls_listen)):
        for host, port in addresses:
            event(logging.WARNING, "socket-activation", "inherited listen fd; ignoring option: "
                  "%(flag)s %(ignored)s", flag=flag, ignored=_written(host, port))
    listeners = []
    for i in range(n):
        fd = SD_LISTEN_FDS_START + i
        try:
            sock = socket.socket(fileno=fd)
        except OSError as e:
            raise ConfigError("inherited fd %d is not a socket: %s" % (fd, e), EXIT_LISTEN) from None
        if sock.type != socket.SOCK_STREAM or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise ConfigError("inherited fd %d is not a listening stream socket" % fd, EXIT_LISTEN)
        sock.setblocking(False)
        listeners.append(Listener(sock, i < len(names) and names[i] == TLS_FD_NAME))
    return listeners


def _unix(path):
    if len(path) > UNIX_PATH_MAX:
        raise ConfigError("socket path too long: %s" % path, EXIT_LISTEN)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise ConfigError("%s exists and is not a socket" % path, EXIT_LISTEN)
        event(logging.WARNING, "stale-socket", "removing existing local socket to replace it",
              path=path)
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        raise ConfigError("bind %s: %s" % (path, e.strerror), EXIT_LISTEN) from None
    sock.setblocking(False)
    return sock


def _tcp(host, port):
    if isinstance(port, str) and port.isascii() and port.isdigit() and int(port) > 65535:
        # getaddrinfo keeps the low 16 bits, in beanstalkd too; a service
        # file may rely on it, so warn rather than refuse
        event(logging.WARNING, "port-out-of-range", "-p %(port)s is not a port (1-65535): listening "
              "on port %(actual)d instead, as beanstalkd does", port=port, actual=int(port) & 0xFFFF)
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM,
                                   0, socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError("getaddrinfo(%s, %s): %s" % (host or "*", port, e.strerror), EXIT_LISTEN) from None
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\0" * 8)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(addr)
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        code = errno.errorcode.get(e.errno, e.errno)
        hint = HINTS.get(e.errno, "")
        raise ConfigError("bind %s port %s: %s (%s)%s" % (host or "*", port, e.strerror, code, hint),
                          EXIT_LISTEN) from None
    sock.setblocking(False)
    return sock


def describe(sock):
    """A listening socket's address as people write it: host:port, [v6]:port, unix:path."""
    name = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        return "unix:" + (name.decode(errors="replace") if isinstance(name, bytes) else name)
    if sock.family == socket.AF_INET6:
        return "[%s]:%d" % (name[0], name[1])
    return "%s:%d" % (name[0], name[1])


def _written(host, port):
    """An address as the flags take it: host:port, [v6]:port, :port, unix:path."""
    if host == UNIX:
        return "unix:" + port
    return "%s:%s" % ("[%s]" % host if host and ":" in host else host or "", port)


def _open(host, port):
    return _unix(port) if host == UNIX else _tcp(host, port)


def open_listeners(config):
    """The listening sockets for config (Listeners): inherited from systemd, or
    the -l/-p one, one per --listen and one per --tls-listen."""
    listeners = _inherited(config)
    inherited = listeners is not None
    if not inherited:
        listeners = []
        if config.classic_listener:
            addr = config.listen_addr
            if addr is not None and addr.startswith("unix:"):
                listeners.append(Listener(_unix(addr[5:]), False))
            else:
                listeners.append(Listener(_tcp(addr or None, config.port), False))
        for flag, addresses, tls in (("--listen", config.listen, False),
                                     ("--tls-listen", config.tls_listen, True)):
            for host, port in addresses:
                try:
                    listeners.append(Listener(_open(host, port), tls))
                except ConfigError as e:
                    for opened, _ in listeners:
                        opened.close()
                    raise ConfigError("%s: %s" % (flag, e), e.status) from None
    for sock, tls in listeners:
        event(logging.INFO, "bind", "listening on %(address)s" + (" (TLS)" if tls else "")
              + (" (socket activation)" if inherited else ""),
              address=describe(sock), fd=sock.fileno(), inherited=inherited, tls=tls)
    return listeners


def open_metrics(config):
    """The HTTP endpoint's listening socket (--metrics)."""
    try:
        return _tcp(config.metrics_host, config.metrics_port)
    except ConfigError as e:
        raise ConfigError("--metrics: %s" % e, e.status) from None


def open_console(config):
    """The web console's listening socket (--console)."""
    try:
        sock = _tcp(config.console_host, config.console_port)
    except ConfigError as e:
        raise ConfigError("--console: %s" % e, e.status) from None
    return sock


def drop_privileges(user):
    """Become user (its uid and primary gid), as beanstalkd's -u does."""
    import pwd
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise ConfigError("getpwnam(\"%s\"): no such user" % user, EXIT_NO_USER) from None
    try:
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    except OSError as e:
        raise ConfigError("cannot become %s: %s" % (user, e.strerror), EXIT_SETUID) from None
