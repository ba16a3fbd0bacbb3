// Compresses and decompresses with the Java libraries Kafka 0.7 used: java.util.zip for gzip
// and CRC-32, snappy-java's stream format for snappy. Run as a single-file program:
//   java -cp /usr/share/java/snappy-java.jar CodecInterop.java <mode> <in> <out>
import java.io.*;
import java.nio.file.*;
import java.util.zip.*;
import org.xerial.snappy.*;

public class CodecInterop {
    public static void main(String[] args) throws Exception {
        byte[] in = Files.readAllBytes(Path.of(args[1]));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        switch (args[0]) {
            case "snappy-compress":
                try (SnappyOutputStream s = new SnappyOutputStream(out)) { s.write(in); }
                break;
            case "snappy-decompress":
                try (SnappyInputStream s = new SnappyInputStream(new ByteArrayInputStream(in))) { s.transferTo(out); }
                break;
            case "gzip-compress":
                try (GZIPOutputStream g = new GZIPOutputStream(out)) { g.write(in); }
                break;
            case "gzip-decompress":
                try (GZIPInputStream g = new GZIPInputStream(new ByteArrayInputStream(in))) { g.transferTo(out); }
                break;
            case "crc32":
                CRC32 crc = new CRC32();
                crc.update(in);
                out.write(Long.toString(crc.getValue()).getBytes());
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + args[0]);
        }
        Files.write(Path.of(args[2]), out.toByteArray());
    }
}
