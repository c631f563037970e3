// Renders the OpenAPI document of this control plane. Everything is served
// by the control plane itself; nothing is loaded from elsewhere.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    persistAuthorization: false,
    tryItOutEnabled: true,
  });
});
