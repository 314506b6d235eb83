-- hr: a software company's people data (synthetic, seeded). Snapshot date 2024-06-30.
-- Dates are TEXT 'YYYY-MM-DD'. Salaries, budgets and hours are REAL.
-- salaries is a history: the current row of an employee has effective_to NULL.

CREATE TABLE departments (
    department_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    parent_department_id INTEGER REFERENCES departments (department_id),
    location TEXT,
    cost_center TEXT NOT NULL UNIQUE
);

CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,  -- e.g. 'ENG3'
    title TEXT NOT NULL,
    min_salary REAL NOT NULL,
    max_salary REAL NOT NULL,
    CHECK (min_salary <= max_salary)
);

CREATE TABLE employees (
    employee_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    email TEXT UNIQUE,
    phone TEXT,
    hire_date TEXT NOT NULL,
    termination_date TEXT,
    job_id TEXT NOT NULL REFERENCES jobs (job_id),
    department_id INTEGER REFERENCES departments (department_id),  -- NULL: contractor pool
    manager_id INTEGER REFERENCES employees (employee_id),         -- NULL: the CEO
    commission_pct REAL,                                           -- sales jobs only
    CHECK (termination_date IS NULL OR termination_date >= hire_date)
);

CREATE TABLE salaries (
    employee_id INTEGER NOT NULL REFERENCES employees (employee_id),
    effective_from TEXT NOT NULL,
    effective_to TEXT,  -- last day of this rate; NULL: current
    amount REAL NOT NULL CHECK (amount > 0),  -- yearly, EUR
    PRIMARY KEY (employee_id, effective_from)
);

CREATE TABLE projects (
    project_id INTEGER PRIMARY KEY,
    code TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    department_id INTEGER NOT NULL REFERENCES departments (department_id),
    start_date TEXT NOT NULL,
    end_date TEXT,  -- NULL: ongoing
    budget REAL
);

-- Employees and projects, many-to-many.
CREATE TABLE project_assignments (
    project_id INTEGER NOT NULL REFERENCES projects (project_id),
    employee_id INTEGER NOT NULL REFERENCES employees (employee_id),
    role TEXT NOT NULL,
    allocation_pct INTEGER NOT NULL CHECK (allocation_pct BETWEEN 1 AND 100),
    assigned_on TEXT NOT NULL,
    PRIMARY KEY (project_id, employee_id)
);

-- Weekly hours booked by an employee on a project they are assigned to.
CREATE TABLE timesheets (
    timesheet_id INTEGER PRIMARY KEY,
    employee_id INTEGER NOT NULL,
    project_id INTEGER NOT NULL,
    week_ending TEXT NOT NULL,  -- a Friday
    hours REAL NOT NULL CHECK (hours > 0 AND hours <= 80),
    approved INTEGER NOT NULL DEFAULT 0 CHECK (approved IN (0, 1)),
    FOREIGN KEY (project_id, employee_id) REFERENCES project_assignments (project_id, employee_id),
    UNIQUE (employee_id, project_id, week_ending)
);

CREATE INDEX idx_employees_department ON employees (department_id);
CREATE INDEX idx_employees_manager ON employees (manager_id);
CREATE INDEX idx_employees_job ON employees (job_id);
CREATE INDEX idx_project_assignments_employee ON project_assignments (employee_id);
CREATE INDEX idx_timesheets_project_week ON timesheets (project_id, week_ending);

-- Each current employee's current salary.
CREATE VIEW v_current_salaries AS
SELECT e.employee_id, e.first_name, e.last_name, e.department_id, e.job_id, s.amount
FROM employees AS e
JOIN salaries AS s ON s.employee_id = e.employee_id AND s.effective_to IS NULL
WHERE e.termination_date IS NULL;

-- Current headcount per department (employees without a department are not counted).
CREATE VIEW v_department_headcount AS
SELECT d.department_id, d.name, COUNT(e.employee_id) AS headcount
FROM departments AS d
LEFT JOIN employees AS e ON e.department_id = d.department_id AND e.termination_date IS NULL
GROUP BY d.department_id;
