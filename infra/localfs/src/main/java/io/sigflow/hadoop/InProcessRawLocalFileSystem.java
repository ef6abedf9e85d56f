package io.sigflow.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's raw local file system, answering two questions in the JVM. Without Hadoop's native
 * library, {@link RawLocalFileSystem} sets a permission by starting {@code chmod} (for every
 * file it creates) and asks whether a path is a symbolic link by starting {@code readlink} (twice
 * for every FileContext rename, which Delta's commits use): a driver of six streaming queries
 * started 20 to 100 processes a second. java.nio makes the same system calls, chmod(2) and
 * lstat(2), in process. With the native library loaded, Hadoop's own calls are as cheap and are
 * kept.
 */
public class InProcessRawLocalFileSystem extends RawLocalFileSystem {

  private static final PosixFilePermission[] BY_BIT = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
      PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ};

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    short mode = permission.toShort();
    // java.nio has no sticky bit: such a mode (Hadoop sets none on files it writes) goes to chmod
    if (NativeIO.isAvailable() || (mode & ~0777) != 0) {
      super.setPermission(p, permission);
      return;
    }
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BY_BIT.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        bits.add(BY_BIT[bit]);
      }
    }
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), bits);
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException("File " + p + " does not exist");
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    if (NativeIO.isAvailable() || Files.isSymbolicLink(pathToFile(f).toPath())) {
      return super.getFileLinkStatus(f);
    }
    // what Hadoop answers for a path `readlink` finds no link at: the path's own status
    return getFileStatus(f);
  }
}
