// Starts the vendored Swagger UI on the service's own OpenAPI document (voda/api/docs_page.py).
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
});
