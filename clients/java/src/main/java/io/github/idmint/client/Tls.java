package io.github.idmint.client;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * Tls makes the SSLContext of a client from PEM files, as {@code idmint dev-certs} writes them,
 * with the JDK alone: a CA bundle to trust, and a client certificate chain with its private key for
 * instances that ask for one ({@code serve --tls-client-ca}). The key may be PKCS#8
 * ({@code PRIVATE KEY}: EC, RSA or Ed25519), SEC1 ({@code EC PRIVATE KEY}) or PKCS#1
 * ({@code RSA PRIVATE KEY}); an encrypted key is refused.
 */
public final class Tls {
    private static final Pattern BLOCK = Pattern.compile(
            "-----BEGIN ([A-Z0-9 ]+)-----([A-Za-z0-9+/=\\s]*)-----END \\1-----");
    private static final byte[] OID_EC = {0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};
    private static final byte[] OID_RSA = {0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01};
    private static final byte[] DER_NULL = {0x05, 0x00};
    private static final byte[] VERSION_0 = {0x02, 0x01, 0x00};

    private Tls() {}

    /**
     * Returns an SSLContext that trusts the CAs in caFile (null: the system's) and presents the
     * certificate chain of certFile with the key of keyFile (both null: no client certificate).
     */
    public static SSLContext sslContext(Path caFile, Path certFile, Path keyFile) throws IOException, GeneralSecurityException {
        if ((certFile == null) != (keyFile == null)) {
            throw new IllegalArgumentException("client certificate: give both the certificate and its key");
        }
        TrustManagerFactory tmf = null;
        if (caFile != null) {
            KeyStore trust = KeyStore.getInstance("PKCS12");
            trust.load(null, null);
            List<Certificate> cas = certificates(caFile, "ca bundle");
            for (int i = 0; i < cas.size(); i++) {
                trust.setCertificateEntry("ca-" + i, cas.get(i));
            }
            tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trust);
        }
        KeyManagerFactory kmf = null;
        if (certFile != null) {
            List<Certificate> chain = certificates(certFile, "client certificate");
            PrivateKey key = privateKey(keyFile);
            char[] password = new char[0];
            KeyStore keys = KeyStore.getInstance("PKCS12");
            keys.load(null, null);
            keys.setKeyEntry("client", key, password, chain.toArray(new Certificate[0]));
            kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(keys, password);
        }
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf == null ? null : tmf.getTrustManagers(), new SecureRandom());
        return ctx;
    }

    /** Reads the PEM certificates of path. */
    static List<Certificate> certificates(Path path, String what) throws IOException, GeneralSecurityException {
        byte[] pem = Files.readAllBytes(path);
        Collection<? extends Certificate> certs = CertificateFactory.getInstance("X.509")
                .generateCertificates(new ByteArrayInputStream(pem));
        if (certs.isEmpty()) {
            throw new GeneralSecurityException(what + " " + path + ": no PEM certificate in it");
        }
        return new ArrayList<>(certs);
    }

    /** Reads the first private key of the PEM file at path. */
    static PrivateKey privateKey(Path path) throws IOException, GeneralSecurityException {
        String pem = Files.readString(path, StandardCharsets.US_ASCII);
        Matcher m = BLOCK.matcher(pem);
        while (m.find()) {
            String type = m.group(1);
            byte[] der = Base64.getMimeDecoder().decode(m.group(2));
            switch (type) {
                case "PRIVATE KEY":
                    return pkcs8(der, path);
                case "EC PRIVATE KEY":
                    return pkcs8(sec1ToPkcs8(der, path), path);
                case "RSA PRIVATE KEY":
                    return pkcs8(seq(VERSION_0, seq(OID_RSA, DER_NULL), tlv(0x04, der)), path);
                case "ENCRYPTED PRIVATE KEY":
                    throw new GeneralSecurityException("key " + path + ": encrypted; give the key unencrypted (mode 0600)");
                default:
                    // a certificate or parameters beside the key
            }
        }
        throw new GeneralSecurityException("key " + path + ": no PEM private key in it");
    }

    private static PrivateKey pkcs8(byte[] der, Path path) throws GeneralSecurityException {
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
        for (String alg : new String[] {"EC", "RSA", "Ed25519", "RSASSA-PSS"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(spec);
            } catch (GeneralSecurityException e) {
                // not this algorithm
            }
        }
        throw new GeneralSecurityException("key " + path + ": not an EC, RSA or Ed25519 private key");
    }

    /**
     * Wraps a SEC1 ECPrivateKey (RFC 5915) into a PKCS#8 PrivateKeyInfo, with the curve the key
     * names in its parameters.
     */
    static byte[] sec1ToPkcs8(byte[] sec1, Path path) throws GeneralSecurityException {
        Der top = new Der(sec1, 0);
        if (top.tag != 0x30) {
            throw new GeneralSecurityException("key " + path + ": EC PRIVATE KEY is not a DER sequence");
        }
        byte[] curve = null;
        for (int at = top.start; at < top.end;) {
            Der e = new Der(sec1, at);
            if (e.tag == 0xa0) { // [0] parameters: the curve's OID
                Der oid = new Der(sec1, e.start);
                if (oid.tag == 0x06) {
                    curve = java.util.Arrays.copyOfRange(sec1, e.start, oid.end);
                }
            }
            at = e.end;
        }
        if (curve == null) {
            throw new GeneralSecurityException("key " + path + ": EC PRIVATE KEY names no curve");
        }
        return seq(VERSION_0, seq(OID_EC, curve), tlv(0x04, sec1));
    }

    /** Der is one DER element of buf at an offset: its tag and where its content starts and ends. */
    private static final class Der {
        final int tag;
        final int start;
        final int end;

        Der(byte[] buf, int at) throws GeneralSecurityException {
            if (at + 2 > buf.length) {
                throw new GeneralSecurityException("truncated DER");
            }
            tag = buf[at] & 0xff;
            int len = buf[at + 1] & 0xff;
            int p = at + 2;
            if (len >= 0x80) {
                int n = len & 0x7f;
                if (n < 1 || n > 3 || p + n > buf.length) {
                    throw new GeneralSecurityException("bad DER length");
                }
                len = 0;
                for (int i = 0; i < n; i++) {
                    len = (len << 8) | (buf[p++] & 0xff);
                }
            }
            start = p;
            end = p + len;
            if (end > buf.length) {
                throw new GeneralSecurityException("truncated DER");
            }
        }
    }

    private static byte[] seq(byte[]... parts) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        for (byte[] p : parts) {
            b.writeBytes(p);
        }
        return tlv(0x30, b.toByteArray());
    }

    private static byte[] tlv(int tag, byte[] content) {
        ByteArrayOutputStream b = new ByteArrayOutputStream(content.length + 6);
        b.write(tag);
        int n = content.length;
        if (n < 0x80) {
            b.write(n);
        } else if (n < 0x100) {
            b.write(0x81);
            b.write(n);
        } else if (n < 0x10000) {
            b.write(0x82);
            b.write(n >> 8);
            b.write(n);
        } else {
            b.write(0x83);
            b.write(n >> 16);
            b.write(n >> 8);
            b.write(n);
        }
        b.writeBytes(content);
        return b.toByteArray();
    }
}
