# The compactor service image: Python 3.11, Java 17 for Spark, Maven to resolve jars.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven \
 && rm -rf /var/lib/apt/lists/*
ENV COMPACTOR_CACHE_DIR=/opt/compactor-cache
WORKDIR /app
COPY pyproject.toml README.md ./
COPY compactor ./compactor
COPY streaming_jobs ./streaming_jobs
COPY schemas ./schemas
RUN pip install --no-cache-dir . && compactor jars > /dev/null
COPY examples/tables.yaml /etc/compactor/tables.yaml
ENTRYPOINT ["compactor", "-v"]
CMD ["run", "--config", "/etc/compactor/tables.yaml", "--warehouse", "/data/warehouse", "--checkpoint", "/data/checkpoint"]
