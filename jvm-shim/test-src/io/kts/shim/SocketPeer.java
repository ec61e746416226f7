package io.kts.shim;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;

/**
 * A real {@link Conn} over a Unix socket whose far end the test holds and plays the sidecar with. The sockets go
 * through the shim's own run-time lookup, so the checks run on Java 11 too.
 */
final class SocketPeer implements AutoCloseable {
    final ServerSocketChannel server;
    final SocketChannel far;
    final Conn conn;

    private SocketPeer(ServerSocketChannel server, SocketChannel far, Conn conn) {
        this.server = server;
        this.far = far;
        this.conn = conn;
    }

    static SocketPeer open(Path socket) throws IOException {
        ServerSocketChannel server = SidecarSockets.openUnixServer();
        server.bind(SidecarSockets.unixAddress(socket));
        SocketChannel client = SidecarSockets.connectUnix(socket);
        return new SocketPeer(server, server.accept(), new Conn(client, 0, null));
    }

    /** The op code of the next request frame the shim sent. */
    int readOp() throws IOException {
        ByteBuffer frame = ByteBuffer.allocate(5);
        while (frame.hasRemaining()) {
            if (far.read(frame) < 0) throw new IOException("closed before a whole frame");
        }
        return frame.get(4);
    }

    /** Writes all of {@code b} as the sidecar would. */
    void write(ByteBuffer b) throws IOException {
        while (b.hasRemaining()) far.write(b);
    }

    @Override
    public void close() throws IOException {
        conn.close();
        far.close();
        server.close();
    }
}
