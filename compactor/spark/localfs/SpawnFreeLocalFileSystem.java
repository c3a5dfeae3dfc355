package io.github.streamingcompactor.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Paths;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system, less the process it starts for two common calls.
 *
 * <p>Without Hadoop's native library, {@link RawLocalFileSystem} runs {@code chmod} for every
 * file it creates with a permission and {@code readlink} for every link status a rename asks
 * for: a fork and two execs of the JVM each, about 2 ms of CPU. A commit through a
 * {@code FileContext} (Delta's log store, Spark's checkpoint files) starts six of them. Here both
 * calls are answered through {@code java.nio}, with the same outcome; anything else (a sticky
 * bit, a symbolic link, a file system without POSIX permissions) takes Hadoop's own path.
 */
public class SpawnFreeLocalFileSystem extends RawLocalFileSystem {
  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    Set<PosixFilePermission> bits = posixBits(permission);
    if (bits == null) {
      super.setPermission(p, permission);
      return;
    }
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), bits);
    } catch (UnsupportedOperationException noPosix) {
      super.setPermission(p, permission);
    }
  }

  /**
   * Hadoop reads the link of {@code new File(f.toString())} with {@code readlink} and, finding
   * none, answers the file's status; a qualified path ({@code file:/...}) never names a link
   * that way. The same test, made in the JVM.
   */
  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    boolean link;
    try {
      link = Files.isSymbolicLink(Paths.get(f.toString()));
    } catch (InvalidPathException unusual) {
      link = true; // let Hadoop's own path decide
    }
    return link ? super.getFileLinkStatus(f) : getFileStatus(f);
  }

  /** The permission as POSIX bits; null when it carries a bit they cannot say (sticky). */
  static Set<PosixFilePermission> posixBits(FsPermission permission) {
    if (permission.getStickyBit()) {
      return null;
    }
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    add(bits, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(bits, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(bits, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return bits;
  }

  private static void add(
      Set<PosixFilePermission> bits,
      FsAction action,
      PosixFilePermission read,
      PosixFilePermission write,
      PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      bits.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      bits.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      bits.add(execute);
    }
  }
}
