//! Runs the Java helper in `tests/java/` with Debian's snappy-java, the library Kafka 0.7 used.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's `libsnappy-java` package puts its jar.
pub const SNAPPY_JAVA_JAR: &str = "/usr/share/java/snappy-java.jar";
/// Where Debian's `libsnappy-jni` package puts the native library.
const SNAPPY_JNI_DIR: &str = "/usr/lib/x86_64-linux-gnu/jni";

/// Runs `CodecInterop.java <mode>` on `input` and returns what it wrote.
///
/// Panics with an install hint when Java or snappy-java is missing: `.ci/run` installs them, so a
/// missing one is a broken machine, not a reason to skip.
pub fn codec_interop(mode: &str, input: &[u8]) -> Vec<u8> {
    assert!(
        Path::new(SNAPPY_JAVA_JAR).exists(),
        "{SNAPPY_JAVA_JAR} is missing: apt-get install -y libsnappy-java default-jre-headless"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let (in_path, out_path) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::write(&in_path, input).expect("write input");
    let output = Command::new("java")
        .arg(format!("-Djava.library.path={SNAPPY_JNI_DIR}"))
        .arg("-Dorg.xerial.snappy.use.systemlib=true")
        .args(["-cp", SNAPPY_JAVA_JAR])
        .arg(helper())
        .args([
            mode,
            in_path.to_str().expect("utf-8 path"),
            out_path.to_str().expect("utf-8 path"),
        ])
        .output()
        .expect("java is missing: apt-get install -y default-jre-headless");
    assert!(
        output.status.success(),
        "java {mode} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read(&out_path).expect("read output")
}

fn helper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("java/CodecInterop.java")
}
