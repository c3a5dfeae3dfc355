package io.github.streamingcompactor.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A Delta log store for object stores with conditional writes (S3 and the S3 APIs that honour
 * {@code If-None-Match: *}), safe beside writers in other processes.
 *
 * <p>Delta's {@code S3SingleDriverLogStore} checks that a commit file is absent and then writes
 * it: a writer in another process (delta-rs, another Spark driver) that commits the same version
 * between the check and the write has its commit overwritten, and its rows are lost. Here the
 * commit file is created by one conditional PUT through Hadoop's S3A connector, which the store
 * refuses when the version exists; Delta then reads the winning commit and retries after it, as
 * on any other store with put-if-absent. Writers in other processes need put-if-absent too
 * (delta-rs does it by default).
 */
public class ConditionalPutLogStore extends HadoopFileSystemLogStore {
  /** Hadoop's create option for "create only if no object is there" (S3A, Hadoop 3.4.2+). */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  public ConditionalPutLogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    byte[] body = joined(actions);
    if (overwrite) { // _last_checkpoint and the like: the last writer wins, as on every store
      try (FSDataOutputStream out = fs.create(path, true)) {
        out.write(body);
      }
      return;
    }
    FSDataOutputStreamBuilder<?, ?> create = fs.createFile(path);
    create.overwrite(true); // the condition is the PUT's, not a check before it
    create.must(CONDITIONAL_CREATE, true);
    try (FSDataOutputStream out = create.build()) {
      out.write(body); // small files go up in one PUT when the stream closes
    } catch (IOException refused) {
      if (!isPreconditionFailure(refused)) {
        throw refused;
      }
      // A PUT retried after its answer was lost finds its own commit: that is a success.
      if (holds(fs, path, body)) {
        return;
      }
      FileAlreadyExistsException exists = new FileAlreadyExistsException(path.toString());
      exists.initCause(refused);
      throw exists;
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false; // an object appears whole or not at all
  }

  private static byte[] joined(Iterator<String> actions) {
    StringBuilder text = new StringBuilder();
    while (actions.hasNext()) {
      text.append(actions.next()).append('\n');
    }
    return text.toString().getBytes(StandardCharsets.UTF_8);
  }

  /** 412 (the object exists) or 409 (another conditional write of the key is in flight). */
  static boolean isPreconditionFailure(Throwable error) {
    for (Throwable e = error; e != null; e = e.getCause()) {
      String name = e.getClass().getName();
      String message = String.valueOf(e.getMessage());
      if (e instanceof org.apache.hadoop.fs.FileAlreadyExistsException
          || name.endsWith("RemoteFileChangedException")
          || message.contains("412")
          || message.contains("PreconditionFailed")
          || message.contains("ConditionalRequestConflict")) {
        return true;
      }
    }
    return false;
  }

  private static boolean holds(FileSystem fs, Path path, byte[] body) throws IOException {
    try (InputStream in = fs.open(path)) {
      return Arrays.equals(in.readAllBytes(), body);
    } catch (java.io.FileNotFoundException gone) {
      return false;
    }
  }
}
