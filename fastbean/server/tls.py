"""TLS for the listeners: the server's SSLContext, built from --tls-cert,
--tls-key and --tls-ca, and reloaded in place on SIGHUP.

One context serves every TLS listener. A handshake reads the certificate
the context holds at that moment, so loading new files into it changes what
new connections see and leaves the open ones alone.
"""
import logging
import ssl

from fastbean.errors import EXIT_CONFIG, ConfigError
from fastbean.logs import event

# A certificate or key that cannot be used is a start-up error like an
# unusable binlog directory: exit status 1.
EXIT_BAD_CERTIFICATE = EXIT_CONFIG     # not one the unit restarts after


class Certificates:
    """The server's TLS context and the files it was built from."""

    def __init__(self, cert, key=None, ca=None):
        self.cert = cert
        self.key = key or cert          # a key in the certificate file is common (HAProxy's way)
        self.ca = ca
        self.context = self._build()

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

    def reload(self):
        """Load the files again (SIGHUP). New handshakes use them; open connections
        keep theirs. Files that cannot be used leave the old ones serving: True if
        the new ones were taken."""
        try:
            # Built aside first: a key that fails after its certificate loaded
            # would leave the live context half changed.
            self._build()
            self.context.load_cert_chain(self.cert, self.key)
            if self.ca is not None:
                # OpenSSL only adds to a context's trust store: a CA taken
                # out of the file stays trusted until a restart.
                self.context.load_verify_locations(cafile=self.ca)
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
