# sharebroker's image. Stages: `build` (a virtualenv with the package), `tests` (the build plus the
# test dependencies and tests/, for the compose `tests` service), and the final broker image, which
# holds only Python and that virtualenv and runs as a non-root user.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/sharebroker
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sharebroker sharebroker
COPY broker broker
COPY protocol protocol
COPY storage storage
COPY config config
COPY pipeline pipeline
COPY cli cli
RUN /opt/sharebroker/bin/pip install --quiet . && /opt/sharebroker/bin/python -m compileall -q /opt/sharebroker >/dev/null

FROM build AS tests
RUN /opt/sharebroker/bin/pip install --quiet '.[test]'
COPY tests tests
COPY docker docker
ENV PATH=/opt/sharebroker/bin:$PATH PYTHONDONTWRITEBYTECODE=1
# The integration and recovery tests against the compose broker, but for the command-line tool's
# (tests/integration/test_cli*.py, more than half of the run's time): `make test` runs them against
# brokers of their own, and `make compose-test` runs `sharebroker configs` against this broker.
CMD ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/integration", "tests/recovery", \
     "--ignore-glob=tests/integration/test_cli*.py"]

# The final image needs neither pip nor setuptools in its virtualenv.
FROM build AS runtime
RUN /opt/sharebroker/bin/pip uninstall --quiet --yes pip setuptools

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 1000 appuser \
    && useradd --system --uid 1000 --gid 1000 --no-create-home --home-dir /nonexistent appuser \
    && mkdir -p /var/lib/sharebroker /etc/sharebroker/certs \
    && chown appuser:appuser /var/lib/sharebroker /etc/sharebroker/certs
COPY --from=runtime /opt/sharebroker /opt/sharebroker
COPY docker/entrypoint.sh /usr/local/bin/sharebroker-entrypoint
ENV PATH=/opt/sharebroker/bin:$PATH PYTHONDONTWRITEBYTECODE=1 SHAREBROKER_LOG_FORMAT=json
USER appuser
VOLUME /var/lib/sharebroker
EXPOSE 9092
# A SASL_SSL listener for the host, when the compose file configures one (certificates from
# `sharebroker certs /etc/sharebroker/certs`, a volume the image owns so appuser can write it)
EXPOSE 9094
# Prometheus metrics, when KAFKA_METRICS_LISTENER=0.0.0.0:9404 is set (off by default)
EXPOSE 9404
# Healthy once the broker answers a Kafka Metadata request on its first listener; SIGTERM (docker
# stop) stops it cleanly in well under a second.
HEALTHCHECK --interval=5s --timeout=5s --start-period=5s --retries=3 CMD ["sharebroker", "healthcheck", "--quiet"]
ENTRYPOINT ["sharebroker-entrypoint"]
