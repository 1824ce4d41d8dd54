// The app this tab pretends to be: a small outdoor shop with three screens.
// Each screen offers the model the tools that make sense *there*, and tells it
// where the user is (the context). Navigating — by the user clicking, or by
// the agent through a tool — changes both, which is what setTools/setContext
// exist for.

import { ToolError } from './sdk/browser.js';

export const PRODUCTS = [
  { id: 'P-1', name: 'Trail running shoes', price: 89, stock: 4 },
  { id: 'P-2', name: 'Rain shell jacket', price: 149, stock: 0 },
  { id: 'P-3', name: 'Merino wool socks', price: 14, stock: 25 },
  { id: 'P-4', name: 'Headlamp 400 lm', price: 39, stock: 7 },
];

const noArgs = { type: 'object', properties: {}, additionalProperties: false };

export class Shop {
  screen = 'catalog';
  productId = 'P-1';
  /** @type {{productId: string, quantity: number}[]} */
  cart = [];
  /** The approval question on screen while tether waits for the shopper, with its answer callback. */
  pendingConfirm = null;
  /** The pickup a clerk is asked to get ready while holdForPickup's task waits, with its callback. */
  pendingPickup = null;

  /** @param {() => void} onChange called after every change of screen or state */
  constructor(onChange) {
    this.onChange = onChange;
  }

  product(id = this.productId) {
    return PRODUCTS.find((p) => p.id === id);
  }

  navigate(screen, productId) {
    this.screen = screen;
    if (productId !== undefined) this.productId = productId;
    this.onChange();
  }

  /** Where the user is, for the model: information, never instructions. */
  context() {
    const pointer = { screen: this.screen };
    if (this.screen === 'product') pointer.productId = this.productId;
    const snapshot = this.screen === 'cart' ? { items: this.cart.length, total: this.total() } : this.screen === 'product' ? { product: this.product()?.name } : { products: PRODUCTS.length };
    return { pointer, snapshot };
  }

  total() {
    return this.cart.reduce((sum, item) => sum + (this.product(item.productId)?.price ?? 0) * item.quantity, 0);
  }

  /** The tools on the current screen. */
  tools() {
    const common = [
      {
        name: 'getVisibleScreen',
        title: 'Read the screen',
        description: 'Returns the screen the shopper is looking at and what is on it.',
        inputSchema: noArgs,
        annotations: { readOnlyHint: true },
        handler: () => ({ screen: this.screen, ...this.context().snapshot }),
      },
    ];
    switch (this.screen) {
      case 'catalog':
        return [...common, this.#searchProducts(), this.#openProduct()];
      case 'product':
        return [...common, this.#addToCart()];
      default:
        return [...common, this.#getCart(), this.#confirmCheckout(), this.#holdForPickup()];
    }
  }

  #searchProducts() {
    return {
      name: 'searchProducts',
      description: 'Searches the catalog by name; returns matching products with price and stock.',
      inputSchema: { type: 'object', properties: { query: { type: 'string', minLength: 1 } }, required: ['query'] },
      annotations: { readOnlyHint: true },
      handler: ({ query }) => {
        const q = String(query ?? '').toLowerCase();
        return { products: PRODUCTS.filter((p) => p.name.toLowerCase().includes(q)) };
      },
    };
  }

  #openProduct() {
    return {
      name: 'openProduct',
      description: 'Opens a product page for the shopper (navigates the app).',
      inputSchema: { type: 'object', properties: { productId: { type: 'string' } }, required: ['productId'] },
      handler: ({ productId }) => {
        const p = this.product(String(productId));
        if (p === undefined) throw new ToolError('not_found', `There is no product ${productId}; search first.`);
        this.navigate('product', p.id);
        return { opened: p };
      },
    };
  }

  #addToCart() {
    return {
      name: 'addToCart',
      description: 'Adds the product on screen to the cart.',
      inputSchema: { type: 'object', properties: { quantity: { type: 'integer', minimum: 1, maximum: 10 } }, required: ['quantity'] },
      handler: ({ quantity }) => {
        const p = this.product();
        if (p.stock === 0) throw new ToolError('out_of_stock', `${p.name} is out of stock.`, { retryable: false });
        this.cart.push({ productId: p.id, quantity: Number(quantity) || 1 });
        this.onChange();
        return { cartItems: this.cart.length, total: this.total() };
      },
    };
  }

  #getCart() {
    return {
      name: 'getCart',
      description: 'Returns the items in the cart and the total.',
      inputSchema: noArgs,
      annotations: { readOnlyHint: true },
      handler: () => ({ items: this.cart.map((i) => ({ ...i, name: this.product(i.productId)?.name })), total: this.total() }),
    };
  }

  #confirmCheckout() {
    return {
      name: 'confirmCheckout',
      description: 'Places the order in the cart. It needs the shopper\'s approval, which tether asks for on screen first.',
      inputSchema: noArgs,
      annotations: { destructiveHint: true },
      // tether ran this only after the shopper approved it (onApproval below).
      handler: async () => ({ orderId: `O-${Date.now() % 100000}`, total: this.total() }),
    };
  }

  #holdForPickup() {
    return {
      name: 'holdForPickup',
      description: 'Asks the store to hold the cart for pickup and waits until a clerk confirms it on the page; runs as a task while they do.',
      inputSchema: noArgs,
      // A clerk takes minutes, far past a call's 7 s leg: the edge runs it as an MCP task and follows it.
      task: 'required',
      handler: (_args, ctx) => this.#waitForClerk(ctx),
    };
  }

  /** Shows the pickup on the page until a clerk marks it ready, or the task is cancelled. */
  #waitForClerk(ctx) {
    // One counter, one clerk: a second hold while one waits is refused rather than queued out of sight.
    if (this.pendingPickup !== null) throw new ToolError('pickup_pending', 'A pickup is already waiting for a clerk; try again once it is ready.');
    const items = this.cart.map((i) => ({ ...i }));
    const total = this.total();
    return new Promise((resolve) => {
      const pickup = {
        text: `Hold ${items.length} item${items.length === 1 ? '' : 's'} (${total} €) for pickup.`,
        ready: () => finish({ pickupCode: `PU-${String(Date.now() % 10000).padStart(4, '0')}`, items, total }),
      };
      const finish = (result) => {
        // Only this pickup's panel: a late abort must not take down the next one.
        if (this.pendingPickup !== pickup) return;
        this.pendingPickup = null;
        this.onChange();
        resolve(result);
      };
      this.pendingPickup = pickup;
      this.onChange();
      // What tasks/get says while the clerk walks to the shelf.
      ctx.status('waiting for a clerk');
      // tasks/cancel (or the ttl) fires the signal: the SDK has already settled the task, so only the panel goes.
      ctx.signal.addEventListener('abort', () => finish(undefined), { once: true });
    });
  }

  /**
   * The SDK's `onApproval` hook: tether asks the shopper before a write runs.
   * The question stays on screen until they answer or nobody waits any more.
   */
  approve(request, signal) {
    return new Promise((resolve) => {
      const finish = (approved) => {
        this.pendingConfirm = null;
        this.onChange();
        resolve(approved);
      };
      const what = request.tool === 'confirmCheckout' ? `Place the order for ${this.total()} €?` : `Allow ${request.title ?? request.tool}?`;
      this.pendingConfirm = { text: `${what} (${JSON.stringify(request.arguments)})`, answer: finish };
      this.onChange();
      signal.addEventListener('abort', () => finish(false));
    });
  }
}
