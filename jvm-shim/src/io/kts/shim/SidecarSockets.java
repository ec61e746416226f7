package io.kts.shim;

import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ProtocolFamily;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.security.SecureRandom;

/**
 * How the shim reaches its sidecar. Unix domain socket channels came with Java 16 (JEP 380), and the shim is built
 * for Java 11, so they are looked up at run time: on 16+ the sidecar listens on an owner-only Unix socket, as
 * before; on 11 to 15 it listens on a loopback TCP port instead, and every connection must first send the
 * {@link #TOKEN_BYTES}-byte secret the shim handed the sidecar in its environment (only the broker's user can
 * read a process's environment), so another local user who finds the port cannot talk to it.
 */
final class SidecarSockets {
    /** The secret's length on the wire; the sidecar reads exactly this many bytes first on a TCP connection. */
    static final int TOKEN_BYTES = 32;
    /** The environment variable carrying the secret (hex) to the sidecar. */
    static final String TOKEN_ENV = "KTS_SIDECAR_TOKEN";

    private static final ProtocolFamily UNIX = unixFamily();
    private static final Method UNIX_ADDRESS_OF = unixAddressOf();
    private static final Method OPEN_CLIENT = openWith(SocketChannel.class);
    private static final Method OPEN_SERVER = openWith(ServerSocketChannel.class);
    private static final SecureRandom RANDOM = new SecureRandom();

    private SidecarSockets() {
    }

    private static ProtocolFamily unixFamily() {
        try {
            return StandardProtocolFamily.valueOf("UNIX");
        } catch (IllegalArgumentException e) {
            return null;  // before Java 16
        }
    }

    private static Method unixAddressOf() {
        try {
            return Class.forName("java.net.UnixDomainSocketAddress").getMethod("of", Path.class);
        } catch (ReflectiveOperationException | LinkageError e) {
            return null;
        }
    }

    private static Method openWith(Class<?> channel) {
        try {
            return channel.getMethod("open", ProtocolFamily.class);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    /** Whether this JVM has Unix domain socket channels (Java 16+). */
    static boolean unixSupported() {
        return UNIX != null && UNIX_ADDRESS_OF != null && OPEN_CLIENT != null && OPEN_SERVER != null;
    }

    /** A fresh secret for one sidecar. */
    static byte[] newToken() {
        byte[] t = new byte[TOKEN_BYTES];
        RANDOM.nextBytes(t);
        return t;
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder(b.length * 2);
        for (byte x : b) sb.append(Character.forDigit((x >> 4) & 0xF, 16)).append(Character.forDigit(x & 0xF, 16));
        return sb.toString();
    }

    static SocketAddress unixAddress(Path path) throws IOException {
        if (!unixSupported()) throw new IOException("Unix domain sockets need Java 16 or newer");
        return (SocketAddress) call(UNIX_ADDRESS_OF, null, path);
    }

    /** A blocking channel connected to a Unix socket (Java 16+). */
    static SocketChannel connectUnix(Path path) throws IOException {
        SocketChannel ch = openUnix();
        try {
            ch.connect(unixAddress(path));
            return ch;
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** An unbound, unconnected Unix socket channel (Java 16+). */
    static SocketChannel openUnix() throws IOException {
        if (!unixSupported()) throw new IOException("Unix domain sockets need Java 16 or newer");
        return (SocketChannel) call(OPEN_CLIENT, null, UNIX);
    }

    /** An unbound Unix server socket channel (Java 16+): for tests that play the sidecar. */
    static ServerSocketChannel openUnixServer() throws IOException {
        if (!unixSupported()) throw new IOException("Unix domain sockets need Java 16 or newer");
        return (ServerSocketChannel) call(OPEN_SERVER, null, UNIX);
    }

    /** A blocking channel to the sidecar's loopback port that has already sent the secret. */
    static SocketChannel connectTcp(int port, byte[] token) throws IOException {
        SocketChannel ch = SocketChannel.open();
        try {
            ch.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
            ch.socket().setTcpNoDelay(true);
            ByteBuffer b = ByteBuffer.wrap(token);
            while (b.hasRemaining()) ch.write(b);
            return ch;
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    private static Object call(Method m, Object target, Object arg) throws IOException {
        try {
            return m.invoke(target, arg);
        } catch (InvocationTargetException e) {
            Throwable t = e.getCause();
            if (t instanceof IOException) throw (IOException) t;
            if (t instanceof RuntimeException) throw (RuntimeException) t;
            if (t instanceof Error) throw (Error) t;
            throw new IOException(Wire.describe(t), t);
        } catch (IllegalAccessException e) {
            throw new IOException(Wire.describe(e), e);
        }
    }

    /** For log lines: where a sidecar listens. */
    static String describe(Path socket, int tcpPort) {
        return tcpPort > 0 ? "127.0.0.1:" + tcpPort + " (TCP, token)" : socket.toString();
    }
}
