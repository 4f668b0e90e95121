"""TLS for the listeners: the server's SSLContext, built from --tls-cert,
--tls-key and --tls-ca. One context serves every TLS listener."""
import ssl

from fastbean.errors import ConfigError

# A certificate or key that cannot be used is a start-up error like an
# unusable binlog directory: exit status 1.
EXIT_BAD_CERTIFICATE = 1


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


def _check_readable(flag, path):
    # ssl reports a missing file as a bare errno, without its name
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise ConfigError("%s %s: %s" % (flag, path, e.strerror or e), EXIT_BAD_CERTIFICATE) from None


def _reason(err):
    return err.reason or str(err)
