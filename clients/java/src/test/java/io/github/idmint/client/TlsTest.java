package io.github.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.interfaces.ECPrivateKey;
import java.security.interfaces.RSAPrivateKey;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** TLS with a private CA and client certificates, from the PEM files idmint dev-certs writes. */
class TlsTest {
    @TempDir
    Path dir;

    @Test
    void clientCertificates() throws Exception {
        Path certs = dir.resolve("certs");
        IdmintServer.run("dev-certs", "--dir", certs.toString());
        IdmintServer.createTag(dir, "order", 100, 0);
        try (IdmintServer server = IdmintServer.start(dir,
                "--tls-cert", certs.resolve("server.pem").toString(),
                "--tls-key", certs.resolve("server-key.pem").toString(),
                "--tls-client-ca", certs.resolve("ca.pem").toString())) {
            assertTrue(server.url().startsWith("https://"));
            try (IdmintClient c = IdmintClient.builder().urls(server.url())
                    .tls(certs.resolve("ca.pem"), certs.resolve("client.pem"), certs.resolve("client-key.pem"))
                    .build()) {
                assertEquals(1, c.next("order"));
                assertEquals(2, c.next("order"));
            }
            // Without a client certificate the handshake is refused: no ID, and a bounded wait.
            try (IdmintClient c = IdmintClient.builder().urls(server.url())
                    .tls(certs.resolve("ca.pem"), null, null)
                    .waitTimeout(Duration.ofMillis(500)).loadTimeout(Duration.ofSeconds(1)).build()) {
                assertThrows(UnavailableException.class, () -> c.next("order"));
            }
        }
    }

    /** The key formats the JDK does not read from PEM by itself: SEC1 (EC) and PKCS#1 (RSA), beside PKCS#8. */
    @Test
    void privateKeyFormats() throws Exception {
        Path ecSec1 = openssl("ec-sec1.pem", "ecparam", "-name", "prime256v1", "-genkey", "-noout");
        Path rsaPkcs8 = openssl("rsa-pkcs8.pem", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048");
        Path rsaPkcs1 = openssl("rsa-pkcs1.pem", "rsa", "-in", rsaPkcs8.toString(), "-traditional");
        Path ecPkcs8 = openssl("ec-pkcs8.pem", "pkcs8", "-topk8", "-nocrypt", "-in", ecSec1.toString());
        assertTrue(Files.readString(ecSec1).contains("BEGIN EC PRIVATE KEY"));
        assertTrue(Files.readString(rsaPkcs1).contains("BEGIN RSA PRIVATE KEY"));
        ECPrivateKey ec = (ECPrivateKey) Tls.privateKey(ecSec1);
        assertEquals(((ECPrivateKey) Tls.privateKey(ecPkcs8)).getS(), ec.getS());
        assertEquals(256, ec.getParams().getCurve().getField().getFieldSize());
        RSAPrivateKey rsa = (RSAPrivateKey) Tls.privateKey(rsaPkcs1);
        RSAPrivateKey rsa8 = (RSAPrivateKey) Tls.privateKey(rsaPkcs8);
        assertEquals(rsa8.getModulus(), rsa.getModulus());
        assertEquals(rsa8.getPrivateExponent(), rsa.getPrivateExponent());
        assertEquals("EC", Tls.privateKey(ecSec1).getAlgorithm());
        assertEquals("RSA", Tls.privateKey(rsaPkcs1).getAlgorithm());

        Path notAKey = dir.resolve("cert-only.pem");
        Files.writeString(notAKey, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
        GeneralSecurityException e = assertThrows(GeneralSecurityException.class, () -> Tls.privateKey(notAKey));
        assertTrue(e.getMessage().contains("no PEM private key"), e.getMessage());
        assertThrows(IllegalArgumentException.class,
                () -> IdmintClient.builder().urls("https://localhost:1").tls(null, ecSec1, null).build());
    }

    private Path openssl(String name, String... args) throws IOException, InterruptedException {
        Path out = dir.resolve(name);
        List<String> cmd = new java.util.ArrayList<>(List.of("openssl"));
        cmd.addAll(List.of(args));
        cmd.addAll(List.of("-out", out.toString()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(1, TimeUnit.MINUTES) || p.exitValue() != 0) {
            throw new IOException("openssl " + String.join(" ", args) + ": " + log);
        }
        return out;
    }
}
