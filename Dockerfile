# gitmem: the HTTP server (gitmem serve) plus the git hooks, on a workspace in /data.
#   docker build -t gitmem .
#   docker run -p 8080:8080 -v gitmem-data:/data gitmem
#   docker run --rm -v gitmem-data:/data gitmem token create --admin   # then use the secret as API key
# The build steps are docker/build.sh, which tests/test_packaging.py runs too.
FROM python:3.12-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
RUN pip install --quiet 'setuptools>=77' wheel && sh docker/build.sh /src && rm -rf /src
ENV GITMEM_HOME=/data GITMEM_ACTOR=service:gitmem
VOLUME /data
EXPOSE 8080
WORKDIR /data
ENTRYPOINT ["gitmem"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
