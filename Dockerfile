# The compactor service image: Python 3.11, Java 17 for Spark, the Spark-side jars resolved at build.
FROM python:3.11-slim-bookworm AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --create-home compactor \
 && mkdir /data && chown compactor /data
ENV COMPACTOR_CACHE_DIR=/opt/compactor-cache
WORKDIR /app
# Dependencies first, in their own layer: a source change does not reinstall pyspark.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

FROM base AS source
COPY README.md ./
COPY compactor ./compactor
COPY streaming_jobs ./streaming_jobs
COPY schemas ./schemas
RUN pip install --no-cache-dir --no-deps .

# Maven and the JDK run only in this stage: neither reaches the final image. The JDK's javac
# compiles the job's own classes (the content certificates' row-hash sums) into the cache.
# STORES: the object stores' connectors the image carries, `--s3` and/or `--gcs` (S3A with the
# AWS SDK bundle adds some 600 MB; the class archive is built for the same jars). Without them
# the image serves local and mounted warehouses only: its final stage has no Maven to fetch them.
FROM source AS jars
ARG STORES=""
RUN apt-get update && apt-get install -y --no-install-recommends maven openjdk-17-jdk-headless
RUN compactor jars --spark-only --class-archive ${STORES} > /dev/null

FROM source
COPY --from=jars /opt/compactor-cache /opt/compactor-cache
COPY examples/tables.yaml /etc/compactor/tables.yaml
USER compactor
ENTRYPOINT ["compactor", "-v"]
EXPOSE 9108
CMD ["run", "--config", "/etc/compactor/tables.yaml", "--warehouse", "/data/warehouse", "--checkpoint", "/data/checkpoint", "--metrics-port", "9108", "--metrics-host", "0.0.0.0"]
