"""TLS for the listeners: the server's SSLContext, built from --tls-cert,
--tls-key and --tls-ca, and built again from them on SIGHUP.

Every TLS listener keeps the context it was given at start; each handshake
is handed the latest one built from the files by the context's SNI callback,
which OpenSSL calls for every ClientHello, with or without a server name. So
a reload changes what new connections see, the trust store included (a CA
taken out of --tls-ca is no longer trusted), and leaves the open ones alone.
"""
import logging
import ssl

from fastbean.errors import EXIT_CONFIG, ConfigError
from fastbean.logs import event

# A certificate or key that cannot be used is a configuration error: exit
# status 78 (EX_CONFIG), which the systemd unit does not restart after.
EXIT_BAD_CERTIFICATE = EXIT_CONFIG


class Certificates:
    """The server's TLS context and the files it was built from."""

    def __init__(self, cert, key=None, ca=None):
        self.cert = cert
        self.key = key or cert          # a key in the certificate file is common (HAProxy's way)
        self.ca = ca
        self.context = self._latest = self._build()
        self.context.sni_callback = self._handshake

    @property
    def mutual(self):
        """Clients must present a certificate signed by the CA."""
        return self.ca is not None

    def _build(self):
        for flag, path in (("--tls-cert", self.cert), ("--tls-key", self.key), ("--tls-ca", self.ca)):
            if path is not None:
                _check_readable(flag, path)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
        except ssl.SSLError as e:
            raise ConfigError("--tls-cert %s, --tls-key %s: not a PEM certificate and its private key (%s)"
                              % (self.cert, self.key, _reason(e)), EXIT_BAD_CERTIFICATE) from None
        if self.ca is not None:
            try:
                context.load_verify_locations(cafile=self.ca)
            except ssl.SSLError as e:
                raise ConfigError("--tls-ca %s: no PEM certificate in it (%s)" % (self.ca, _reason(e)),
                                  EXIT_BAD_CERTIFICATE) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def _handshake(self, ssl_object, server_name, context):
        # a ClientHello: the handshake goes on with the latest files' context
        if context is not self._latest:
            ssl_object.context = self._latest

    def reload(self):
        """Load the files again (SIGHUP). New handshakes use them; open connections
        keep theirs. Files that cannot be used leave the old ones serving: True if
        the new ones were taken."""
        try:
            # a context of its own: built whole, or not at all
            self._latest = self._build()
        except (ConfigError, ssl.SSLError, OSError) as e:
            event(logging.ERROR, "tls-reload-failed", "TLS certificates not reloaded, the old ones "
                  "still serve: %(error)s", error=str(e))
            return False
        event(logging.INFO, "tls-reloaded", "TLS certificate reloaded from %(cert)s", cert=self.cert)
        return True


def _check_readable(flag, path):
    # ssl reports a missing file as a bare errno, without its name
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ConfigError("%s %s: %s" % (flag, path, e.strerror or e), EXIT_BAD_CERTIFICATE) from None


def _reason(err):
    return err.reason or str(err)
