FROM python:3.11-slim AS product
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
# .dockerignore keeps .env, .venv, var/ and .git out of the image.
COPY . .
# The admin's static files, collected at build time under hashed names (whitenoise serves them).
# Settings refuse to load without production secrets; these placeholders exist only for this step.
RUN DJANGO_DEBUG=0 DJANGO_SECRET_KEY=collectstatic-only LLM_API_KEY=unused WEBHOOK_SECRET=unused \
    FLOWER_BASIC_AUTH=unused:unused PUBLIC_BASE_URL=https://unused.invalid \
    DEFAULT_FROM_EMAIL=unused@unused.invalid METRICS_TOKEN=unused python manage.py collectstatic --noinput
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
