import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.SecureRandom;
import java.security.spec.MGF1ParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.Arrays;
import java.util.Base64;
import javax.crypto.Cipher;
import javax.crypto.KeyGenerator;
import javax.crypto.SecretKey;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.OAEPParameterSpec;
import javax.crypto.spec.PSource;
import javax.crypto.spec.SecretKeySpec;

/**
 * Test peer written against the JDK only, with the algorithms Aiven's plugin uses: AES/GCM/NoPadding with a
 * random 12-byte IV stored before the ciphertext, and RSA-OAEP with SHA3-512 for both the digest and MGF1.
 *
 * encrypt PUB_DER PLAINTEXT OUTDIR : writes wrapped.bin (RSA ciphertext of the DEK), aad.bin, chunk.bin
 * decrypt PRIV_DER WRAPPED AAD CHUNK : prints the decrypted chunk to stdout
 */
public final class AivenCryptoInterop {
    private static OAEPParameterSpec oaep() {
        return new OAEPParameterSpec("SHA3-512", "MGF1", new MGF1ParameterSpec("SHA3-512"),
            PSource.PSpecified.DEFAULT);
    }

    public static void main(String[] args) throws Exception {
        KeyFactory kf = KeyFactory.getInstance("RSA");
        if (args[0].equals("encrypt")) {
            PublicKey pub = kf.generatePublic(new X509EncodedKeySpec(Files.readAllBytes(Path.of(args[1]))));
            byte[] plain = Files.readAllBytes(Path.of(args[2]));
            KeyGenerator kg = KeyGenerator.getInstance("AES");
            kg.init(256, new SecureRandom());
            SecretKey dek = kg.generateKey();
            byte[] aad = kg.generateKey().getEncoded();
            Cipher rsa = Cipher.getInstance("RSA/ECB/OAEPPadding");
            rsa.init(Cipher.ENCRYPT_MODE, pub, oaep());
            byte[] wrapped = rsa.doFinal(dek.getEncoded());
            Cipher aes = Cipher.getInstance("AES/GCM/NoPadding");
            aes.init(Cipher.ENCRYPT_MODE, dek, new SecureRandom());
            aes.updateAAD(aad);
            byte[] ct = aes.doFinal(plain);
            byte[] iv = aes.getIV();
            byte[] chunk = new byte[iv.length + ct.length];
            System.arraycopy(iv, 0, chunk, 0, iv.length);
            System.arraycopy(ct, 0, chunk, iv.length, ct.length);
            Path out = Path.of(args[3]);
            Files.write(out.resolve("wrapped.bin"), wrapped);
            Files.write(out.resolve("aad.bin"), aad);
            Files.write(out.resolve("chunk.bin"), chunk);
        } else {
            PrivateKey priv = kf.generatePrivate(new PKCS8EncodedKeySpec(Files.readAllBytes(Path.of(args[1]))));
            Cipher rsa = Cipher.getInstance("RSA/ECB/OAEPPadding");
            rsa.init(Cipher.DECRYPT_MODE, priv, oaep());
            byte[] dek = rsa.doFinal(Files.readAllBytes(Path.of(args[2])));
            byte[] aad = Files.readAllBytes(Path.of(args[3]));
            byte[] chunk = Files.readAllBytes(Path.of(args[4]));
            Cipher aes = Cipher.getInstance("AES/GCM/NoPadding");
            aes.init(Cipher.DECRYPT_MODE, new SecretKeySpec(dek, "AES"),
                new GCMParameterSpec(128, Arrays.copyOfRange(chunk, 0, 12)));
            aes.updateAAD(aad);
            System.out.write(aes.doFinal(chunk, 12, chunk.length - 12));
            System.out.flush();
        }
    }
}
