FROM python:3.11-slim AS product
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
# The lock (requirements.lock: requirements.txt compiled with every package's hashes, README
# "Deploy") installs exactly what was reviewed: a changed or substituted file fails the build.
COPY requirements.lock .
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock
# .dockerignore keeps .env, .venv, var/ and .git out of the image.
COPY . .
# The admin's static files, collected at build time under hashed names (whitenoise serves them).
# No secret is needed or given: settings fill throwaway ones for this command alone.
RUN python manage.py collectstatic --noinput
RUN useradd --create-home app && chown -R app /app
USER app
EXPOSE 8000
CMD ["gunicorn", "config.wsgi", "--config", "config/gunicorn.py"]

# The demo and staging stand-ins (compose profile "sim": llm_sim, the SMTP sink): the product
# image plus requirements-demo.txt. Production runs the `product` stage only.
FROM product AS sim
USER root
RUN pip install --no-cache-dir -r requirements-demo.txt
USER app
