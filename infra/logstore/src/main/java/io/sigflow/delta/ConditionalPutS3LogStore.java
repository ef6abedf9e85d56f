package io.sigflow.delta;

import io.delta.storage.S3SingleDriverLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * Delta's S3 log store with mutual exclusion done by S3 itself.
 *
 * <p>S3SingleDriverLogStore checks that a commit file does not exist and then creates it;
 * two drivers can both pass the check, and the second PUT silently replaces the first
 * commit (measured: docs/deploy.md, several writers on S3). Here a new commit file is created with S3A's
 * conditional create ({@code fs.option.create.conditional.overwrite}: an If-None-Match PUT),
 * so S3 refuses the second one (HTTP 412). That refusal is turned into the
 * FileAlreadyExistsException Delta's optimistic transaction expects: it checks the winner's
 * commit for conflicts and, for appends, commits again with the next version. delta-rs commits
 * with If-None-Match too, so both writers exclude each other.
 */
public class ConditionalPutS3LogStore extends S3SingleDriverLogStore {
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  public ConditionalPutS3LogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    if (overwrite) { // checkpoints and _last_checkpoint: last writer wins, as before
      super.write(path, actions, true, hadoopConf);
      return;
    }
    FileSystem fs = path.getFileSystem(hadoopConf);
    Path resolved = fs.makeQualified(path);
    // createFile's builder is a raw type in Hadoop's API: build() is typed Object here.
    try (FSDataOutputStream out = (FSDataOutputStream)
        fs.createFile(resolved).overwrite(false).must(CONDITIONAL_CREATE, true).build()) {
      while (actions.hasNext()) {
        out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException | RemoteFileChangedException e) {
      // S3A reports the refused If-None-Match PUT (HTTP 412) as RemoteFileChangedException
      throw new java.nio.file.FileAlreadyExistsException(resolved.toString());
    }
  }
}
