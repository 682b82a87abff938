FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker broker
COPY protocol protocol
COPY storage storage
COPY config config
RUN pip install --no-cache-dir .
EXPOSE 9092
VOLUME /var/lib/sharebroker
# Settings come from KAFKA_* environment variables, as with the Apache Kafka image.
ENV KAFKA_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092 \
    KAFKA_LOG_DIRS=/var/lib/sharebroker
CMD ["sharebroker", "serve", "--log-format", "json"]
